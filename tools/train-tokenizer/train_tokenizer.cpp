// `linac-train-tokenizer --model_prefix=PREFIX --vocab_size=N [--pad_vocab_to=M] [flags...]`:
// trains a SentencePiece model on linac's embedded corpus (runtime/data/default_corpus.cpp), one
// sentence per non-blank line of each document, with libsentencepiece's trainer. Every flag but
// --pad_vocab_to is SentencePiece's own (spm_train's), checked by the library; this tool
// supplies the text. The embedded corpus is small by design (a few hundred words): it yields at
// most ~2,200 BPE pieces, so --pad_vocab_to=M adds M - N user-defined pieces "<u0>", "<u1>", ..., (after
// the meta pieces, never produced from text) for a model of M entries whose LM head and loss
// are sized as a real M-entry vocabulary's. bench/train_tokenizer.sh records the flags
// bench/tokenizer32k.model was made with.
#include <sentencepiece_trainer.h>

#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/data.h"

namespace {

/// This tool's own flag: pad the learned vocabulary with unused pieces to this size.
constexpr const char* kPadFlag = "pad_vocab_to";

/// The embedded corpus's non-blank lines, in order.
class CorpusLines final : public sentencepiece::SentenceIterator {
 public:
  CorpusLines() {
    for (const std::string& doc : linac::data::defaultCorpusDocuments()) {
      size_t start = 0;
      while (start <= doc.size()) {
        size_t end = doc.find('\n', start);
        if (end == std::string::npos) end = doc.size();
        if (doc.find_first_not_of(" \t\r", start) < end) lines_.push_back(doc.substr(start, end - start));
        start = end + 1;
      }
    }
  }
  bool done() const override { return next_ >= lines_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return lines_[next_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }
  size_t size() const { return lines_.size(); }

 private:
  std::vector<std::string> lines_;
  size_t next_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: linac-train-tokenizer --model_prefix=PREFIX --vocab_size=N [--pad_vocab_to=M] "
                 "[SentencePiece trainer flags]\n"
                 "trains a SentencePiece model on linac's embedded corpus (flags: spm_train's)\n";
    return 2;
  }
  // spm_train's flags as SentencePiece's keyword form (a list of 30k padding pieces would not fit
  // one command-line argument).
  std::unordered_map<std::string, std::string> kwargs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::cerr << "linac-train-tokenizer: error: expected --flag=value, got '" << arg << "'\n";
      return 2;
    }
    kwargs[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  if (const auto pad = kwargs.find(kPadFlag); pad != kwargs.end()) {
    const auto learned = kwargs.find("vocab_size");
    const long target = std::stol(pad->second);
    const long base = learned == kwargs.end() ? 0 : std::stol(learned->second);
    if (base < 1 || target <= base || kwargs.count("user_defined_symbols")) {
      std::cerr << "linac-train-tokenizer: error: --" << kPadFlag << " needs --vocab_size below it and no "
                << "--user_defined_symbols\n";
      return 2;
    }
    std::string symbols;
    for (long i = 0; i < target - base; ++i) symbols += (i ? ",<u" : "<u") + std::to_string(i) + ">";
    kwargs["user_defined_symbols"] = symbols;
    kwargs["vocab_size"] = std::to_string(target);
    kwargs.erase(pad);
  }
  CorpusLines lines;
  std::cout << "linac-train-tokenizer: " << lines.size() << " lines of the embedded corpus, vocab_size "
            << kwargs["vocab_size"] << std::endl;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &lines);
  if (!status.ok()) {
    std::cerr << "linac-train-tokenizer: error: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
