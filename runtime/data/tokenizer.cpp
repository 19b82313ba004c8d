// The byte tokenizer (always available) and the SentencePiece one (when the build found
// libsentencepiece: LINAC_HAVE_SENTENCEPIECE).
#include "data/data.h"

#include <stdexcept>

#ifdef LINAC_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace linac::data {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255)
        throw std::invalid_argument("byte tokenizer: id " + std::to_string(ids[i]) + " is outside 0..255");
      text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
    }
    return text;
  }
  int64_t vocabSize() const override { return 256; }
  std::string name() const override { return "byte"; }
  // NUL never occurs in ordinary text, so it is free to mark document ends.
  int64_t documentSeparator() const override { return 0; }
};

#ifdef LINAC_HAVE_SENTENCEPIECE
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const auto status = sp_.Load(path);
    if (!status.ok()) throw DataError(path + ": cannot load SentencePiece model: " + status.ToString());
    // Models trained without </s> (eos_id = -1) still always have <unk>.
    separator_ = sp_.eos_id() >= 0 ? sp_.eos_id() : sp_.unk_id();
  }
  std::vector<int64_t> encode(const std::string& text) const override {
    const std::vector<int> ids = sp_.EncodeAsIds(text);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> narrow(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocabSize())
        throw std::invalid_argument(name() + ": id " + std::to_string(ids[i]) + " is outside the vocabulary");
      narrow[i] = static_cast<int>(ids[i]);
    }
    return sp_.DecodeIds(narrow);
  }
  int64_t vocabSize() const override { return sp_.GetPieceSize(); }
  std::string name() const override { return "sentencepiece:" + path_; }
  int64_t documentSeparator() const override { return separator_; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  int64_t separator_ = 0;
};
#endif

}  // namespace

std::unique_ptr<Tokenizer> makeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& modelPath) {
#ifdef LINAC_HAVE_SENTENCEPIECE
  return std::make_unique<SentencePieceTokenizer>(modelPath);
#else
  throw DataError(modelPath +
                  ": this build has no SentencePiece support (libsentencepiece was not found "
                  "when linac was configured); use the byte tokenizer or rebuild with libsentencepiece-dev");
#endif
}

}  // namespace linac::data
