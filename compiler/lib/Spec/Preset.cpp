// Model presets (specs/presets/*.yaml): width, depth, vocabulary, attention heads.
#include "Internal.h"
#include "linac/Spec/Limits.h"
#include "linac/Spec/SpecParser.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace linac::spec {

PresetSpec parsePreset(std::string_view text, const std::string& file) {
  detail::YamlDoc doc(text, file, "preset");
  detail::MapReader r(doc, doc.root(), SourceLoc{file, 1, 1}, "preset",
                      {"name", "description", "hidden", "layers", "vocab", "attn_heads", "intermediate",
                       "max_seq_len", "tie_embeddings"});
  PresetSpec p;
  p.file = file;
  p.name = r.string("name");
  p.hidden = r.integerIn("hidden", 1, limits::kMaxHidden);
  p.layers = r.integerIn("layers", 1, limits::kMaxLayers);
  p.vocab = r.integerIn("vocab", 1, limits::kMaxVocab);
  p.attnHeads = r.integerIn("attn_heads", 1, limits::kMaxHeads);
  if (p.hidden % p.attnHeads != 0)
    throw SpecError(r.valueLoc("attn_heads"), fmt::format("attn_heads {} does not divide hidden {}", p.attnHeads, p.hidden));
  // 0: fla's default width.
  p.intermediate = r.integerInOr("intermediate", 0, limits::kMaxIntermediate, 0);
  p.maxSeqLen = r.integerInOr("max_seq_len", 1, limits::kMaxSeqLen, p.maxSeqLen);
  p.tieEmbeddings = r.boolean("tie_embeddings", p.tieEmbeddings);
  return p;
}

PresetSpec loadPreset(const std::string& nameOrPath, const std::string& presetDir) {
  namespace fs = std::filesystem;
  const bool isPath = nameOrPath.find('/') != std::string::npos || nameOrPath.ends_with(".yaml");
  if (isPath) return parsePreset(detail::readFile(nameOrPath), nameOrPath);
  fs::path path = fs::path(presetDir) / (nameOrPath + ".yaml");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    std::vector<std::string> known;
    for (const auto& entry : fs::directory_iterator(presetDir, ec))
      if (entry.path().extension() == ".yaml") known.push_back(entry.path().stem().string());
    std::sort(known.begin(), known.end());
    throw detail::unknownWord(SourceLoc{"--preset", 0, 0}, "preset", nameOrPath, known);
  }
  return parsePreset(detail::readFile(path.string()), path.string());
}

}  // namespace linac::spec
