// Corpus readers (.txt, .jsonl, .bin, directories of them) and the document-level held-out split.
#include "data/data.h"
#include "data/files.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#ifdef LINAC_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

namespace linac::data {
namespace {

using Documents = std::vector<std::vector<int64_t>>;
using detail::lowerExtension;
using detail::readWholeFile;

void addTextDocument(const std::string& text, const Tokenizer& tokenizer, Documents& out) {
  std::vector<int64_t> ids = tokenizer.encode(text);
  if (ids.empty()) return;
  ids.push_back(tokenizer.documentSeparator());
  out.push_back(std::move(ids));
}

bool isBlank(std::string_view line) { return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos; }

// Plain text: paragraphs (runs of non-blank lines) are documents, so one large .txt file still
// gives a document-level held-out split; the lines of a paragraph keep their newlines.
void readText(const std::string& path, const Tokenizer& tokenizer, Documents& out) {
  const std::string text = readWholeFile(path);
  std::string paragraph;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    if (isBlank(line)) {
      addTextDocument(paragraph, tokenizer, out);
      paragraph.clear();
    } else {
      if (!paragraph.empty()) paragraph += '\n';
      paragraph.append(line);
    }
    start = end + 1;
  }
  addTextDocument(paragraph, tokenizer, out);
}

void readJsonl(const std::string& path, const Tokenizer& tokenizer, Documents& out) {
#ifdef LINAC_HAVE_NLOHMANN_JSON
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open for reading");
  std::string line;
  for (int64_t lineNo = 1; std::getline(in, line); ++lineNo) {
    if (isBlank(line)) continue;
    const std::string where = path + ":" + std::to_string(lineNo) + ": ";
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(where + "invalid JSON (" + e.what() + ")");
    }
    if (!record.is_object()) throw DataError(where + "expected a JSON object with a \"text\" string");
    const auto it = record.find("text");
    if (it == record.end()) throw DataError(where + "no \"text\" field");
    if (!it->is_string()) throw DataError(where + "\"text\" is not a string");
    addTextDocument(it->get_ref<const std::string&>(), tokenizer, out);
  }
  if (in.bad()) throw DataError(path + ": read error");
#else
  (void)tokenizer;
  (void)out;
  throw DataError(path +
                  ": this build cannot read .jsonl (nlohmann_json was not found when linac "
                  "was configured)");
#endif
}

// Pre-tokenized shard: little-endian ids, decoded byte by byte so the host's byte order does not
// matter. Documents end after each separator id (the usual EOT-joined shard layout).
void readBinary(const std::string& path, const Tokenizer& tokenizer, int width, Documents& out) {
  const std::string header = path.substr(0, path.size() - lowerExtension(path).size()) + ".json";
  if (detail::isRegularFile(header))
    throw DataError(path + ": a token shard with a header (" + header +
                    "): shards are read lazily by `linac train --data`, not loaded as a corpus");
  const std::string bytes = readWholeFile(path);
  if (bytes.size() % width != 0)
    throw DataError(path + ": " + std::to_string(bytes.size()) + " bytes is not a multiple of " +
                    std::to_string(width) + " (uint" + std::to_string(8 * width) + " ids)");
  const int64_t vocab = tokenizer.vocabSize();
  const int64_t separator = tokenizer.documentSeparator();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<int64_t> doc;
  for (size_t i = 0; i < bytes.size() / width; ++i) {
    int64_t id = 0;
    for (int b = width - 1; b >= 0; --b) id = (id << 8) | p[i * width + b];
    if (id >= vocab)
      throw DataError(path + ": id " + std::to_string(id) + " at position " + std::to_string(i) +
                      " is outside the tokenizer's vocabulary (" + std::to_string(vocab) + ", " +
                      tokenizer.name() + ")");
    doc.push_back(id);
    if (id == separator) out.push_back(std::move(doc)), doc = {};
  }
  if (!doc.empty()) out.push_back(std::move(doc));
}

void readFile(const std::string& path, const std::string& ext, const Tokenizer& tokenizer, int binWidth,
              Documents& out) {
  if (ext == ".txt")
    readText(path, tokenizer, out);
  else if (ext == ".jsonl")
    readJsonl(path, tokenizer, out);
  else
    readBinary(path, tokenizer, binWidth, out);
}

void checkHeldOutFraction(double heldOutFraction) {
  if (!(heldOutFraction >= 0.0 && heldOutFraction < 1.0))
    throw std::invalid_argument("heldOutFraction must lie in [0, 1), got " + std::to_string(heldOutFraction));
}

}  // namespace

Corpus makeCorpus(Documents documents, double heldOutFraction, std::string description) {
  checkHeldOutFraction(heldOutFraction);
  std::erase_if(documents, [](const std::vector<int64_t>& d) { return d.empty(); });
  if (documents.empty()) throw DataError(description + ": empty corpus (no tokens)");

  Corpus corpus;
  const size_t n = documents.size();
  size_t heldDocs = 0;
  if (heldOutFraction > 0.0 && n == 1) {
    // One document cannot be split by documents: hold out its tail instead.
    std::vector<int64_t>& only = documents.front();
    if (only.size() < 2) throw DataError(description + ": one token is too little to hold any out");
    const auto held = std::clamp<size_t>(std::llround(heldOutFraction * only.size()), 1, only.size() - 1);
    corpus.train.assign(only.begin(), only.end() - held);
    corpus.heldOut.assign(only.end() - held, only.end());
  } else {
    std::vector<bool> held(n, false);
    if (heldOutFraction > 0.0) {
      heldDocs = std::clamp<size_t>(std::llround(heldOutFraction * n), 1, n - 1);
      // Evenly spread (the middle of each of heldDocs equal strides), so the held-out set samples
      // the whole corpus rather than its last files; strides are > 1 document, so no repeats.
      for (size_t i = 0; i < heldDocs; ++i) held[(2 * i + 1) * n / (2 * heldDocs)] = true;
    }
    for (size_t i = 0; i < n; ++i) {
      auto& dst = held[i] ? corpus.heldOut : corpus.train;
      dst.insert(dst.end(), documents[i].begin(), documents[i].end());
    }
  }
  corpus.description = description + ": " + std::to_string(n) + " documents, " +
                       std::to_string(corpus.train.size()) + " train tokens, " +
                       std::to_string(corpus.heldOut.size()) + " held-out tokens" +
                       (heldDocs ? " (" + std::to_string(heldDocs) + " documents)" : std::string());
  return corpus;
}

Corpus loadCorpus(const std::string& path, const Tokenizer& tokenizer, double heldOutFraction,
                  const std::string& binDtype) {
  checkHeldOutFraction(heldOutFraction);  // before reading what may be a large corpus
  if (binDtype != "uint16" && binDtype != "uint32")
    throw std::invalid_argument("binDtype must be \"uint16\" or \"uint32\", got \"" + binDtype + "\"");
  const int binWidth = binDtype == "uint16" ? 2 : 4;

  const std::vector<std::string> files = detail::corpusFiles(path);

  Documents documents;
  for (const std::string& file : files) readFile(file, lowerExtension(file), tokenizer, binWidth, documents);
  std::string description = path + " (" + std::to_string(files.size()) +
                            (files.size() == 1 ? " file" : " files") + ", tokenizer " + tokenizer.name() +
                            ")";
  return makeCorpus(std::move(documents), heldOutFraction, std::move(description));
}

}  // namespace linac::data
