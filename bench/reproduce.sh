#!/usr/bin/env bash
# A small-scale reproduction of "A Systematic Analysis of Hybrid Linear Attention" (arXiv
# 2507.06457) with linac: linear-attention variants at several linear:full ratios and pure, plus a
# Transformer, trained on the same tokens and compared on language modelling, RULER and MQAR
# recall, and their inference caches. Two resumable `linac sweep` folders:
#   lm/    the `small` preset (8 layers, width 512, fla's 32,000-entry vocabulary) trained on the
#          embedded corpus: perplexity, RULER's tasks at two context lengths, cache bytes
#   mqar/  the calibrated MQAR run of specs/tasks/mqar.yaml (two layers, width 128; pure, 1:1 and
#          the Transformer, as two layers allow): recall at 4, 8 and 16 key-value pairs
# then one table (table.md, table.json) from both results.csv. Re-running continues both folders.
#
#   bash bench/reproduce.sh OUT [LINAC]     (LINAC: the linac executable, default build/bin/linac)
#
# Environment (defaults in brackets): PART (lm, mqar or all [all]), DEVICE [auto], SPECS [gated_deltanet
# gla retnet hgrn2], SCHEDULES [pure,6:1,3:1,transformer], SEEDS [1], LM_STEPS [400], LM_BATCH [16],
# LM_SEQ [1024], CONTEXTS (RULER's) [512,1024], EXAMPLES (per RULER task and context) [32],
# MQAR_SCHEDULES [pure,1:1,transformer], MQAR_STEPS [3000], MQAR_SEEDS [1].
set -uo pipefail
OUT=${1:?usage: bash bench/reproduce.sh OUT [LINAC]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LINAC=${2:-$ROOT/build/bin/linac}
PART=${PART:-all}
DEVICE=${DEVICE:-auto}
SPECS=${SPECS:-gated_deltanet gla retnet hgrn2}
spec_list=$(for s in $SPECS; do printf '%s,' "$ROOT/specs/$s.yaml"; done)
spec_list=${spec_list%,}
mkdir -p "$OUT"
rc=0

if [ "$PART" = lm ] || [ "$PART" = all ]; then
  echo "== language modelling: $SPECS x ${SCHEDULES:-pure,6:1,3:1,transformer}, preset small"
  "$LINAC" sweep --specs "$spec_list" --schedules "${SCHEDULES:-pure,6:1,3:1,transformer}" --preset small \
    --steps "${LM_STEPS:-400}" --seeds "${SEEDS:-1}" --device "$DEVICE" --tasks ppl,ruler --out "$OUT/lm" \
    --train-args "--tokenizer $ROOT/bench/tokenizer32k.model --batch ${LM_BATCH:-16} --seq-len ${LM_SEQ:-1024} --lr 1e-3" \
    --eval-args "--context ${CONTEXTS:-512,1024} --examples ${EXAMPLES:-32}" --memory-context 4096 || rc=1
fi
if [ "$PART" = mqar ] || [ "$PART" = all ]; then
  echo "== MQAR recall: $SPECS x ${MQAR_SCHEDULES:-pure,1:1,transformer}, specs/tasks/mqar.yaml"
  "$LINAC" sweep --specs "$spec_list" --schedules "${MQAR_SCHEDULES:-pure,1:1,transformer}" --preset mqar \
    --steps "${MQAR_STEPS:-3000}" --seeds "${MQAR_SEEDS:-1}" --device "$DEVICE" --tasks mqar --out "$OUT/mqar" \
    --train-args "--config $ROOT/specs/tasks/mqar.yaml" --eval-args "--mqar-pairs 4,8,16" || rc=1
fi
python3 "$ROOT/bench/reproduce_table.py" "$OUT" || rc=1
exit $rc
