// File helpers shared by the corpus readers (corpus.cpp) and the token shards (token_shards.cpp).
// Files are found and read with POSIX calls, not std::filesystem: the PyPI libtorch.so exports its
// own copies of std::filesystem::status, remove_all, ... which interpose on libstdc++'s in every
// binary linking torch (its remove_all crashes there), so std::filesystem is not safe to call.
#pragma once

#include <string>
#include <vector>

namespace linac::data::detail {

/// The whole file; throws DataError naming the path when it cannot be read.
std::string readWholeFile(const std::string& path);
/// ".txt" for "a/b.TXT"; "" when the name has no extension.
std::string lowerExtension(const std::string& path);
/// .txt, .jsonl or .bin.
bool isCorpusExtension(const std::string& ext);
bool isRegularFile(const std::string& path);
/// `path` itself when it is a file with a corpus extension, or every corpus file below the
/// directory `path` (following symlinks; hidden entries skipped) in sorted path order. Throws
/// DataError when the path is missing, has another extension, or the directory holds none.
std::vector<std::string> corpusFiles(const std::string& path);

}  // namespace linac::data::detail
