#!/usr/bin/env bash
# Makes bench/tokenizer32k.model: a 32,000-entry SentencePiece model for the benchmarks, so the LM
# head and the loss are sized as at fla's vocabulary. The only licence-clean text in the
# repository is the embedded generated corpus (runtime/data/default_corpus.cpp: 2,400 documents,
# 3,186 lines, a few hundred distinct words, written by the project), which SentencePiece's trainer
# cannot stretch to 32,000 learned pieces (at most 780 unigram pieces, 2,220 BPE pieces within
# words, 13,405 across words). So 2,000 BPE pieces are learned from it and 30,000 user-defined
# pieces "<u0>".."<u29999>" (never produced from text) fill the vocabulary to 32,000 entries.
# Identity normalization keeps the file under 1 MB (NFKC's tables are ~240 KB; the corpus is ASCII).
#   bash bench/train_tokenizer.sh [BUILD_DIR]   (needs build/bin/linac-train-tokenizer)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
LEARNED_PIECES=2000
VOCAB=32000
cd "$ROOT"
"$BUILD/bin/linac-train-tokenizer" --model_prefix=bench/tokenizer32k --model_type=bpe \
  --vocab_size=$LEARNED_PIECES --pad_vocab_to=$VOCAB --normalization_rule_name=identity \
  --num_threads=1 --minloglevel=1
rm -f bench/tokenizer32k.vocab
sha256sum bench/tokenizer32k.model
