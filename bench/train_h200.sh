#!/usr/bin/env bash
# One device call for training (issue 4's benchmark, issue 5's NCCL check):
#  1. the 340m hybrid built from fla's layers (bench/fla_model_bench.py), Gated DeltaNet 3:1 and
#     GLA 3:1, timed while nothing else uses the GPU (its Triton compiles overlap linac's build);
#  2. `linac train --preset 340m` for the same two models and shape (bf16 autocast, B=4 T=4096,
#     byte vocabulary 256 on both sides), tokens/s from the metrics file;
#  3. a 340m Gated DeltaNet 3:1 run of 200 steps (B=1 T=2048) that must end without NaN;
#  4. the NCCL path at world size 1 (torchrun-style environment) on a tiny model.
# Results under $OUT; bench/train_summary.py prints the table.
# Usage: bash bench/train_h200.sh [timed-steps]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${1:-10}
start=$SECONDS
(
  for v in gated_deltanet gla; do
    PYTHONPATH=.fla/site PYTHONUNBUFFERED=1 timeout 300 python3 bench/fla_model_bench.py --variant "$v" \
      --batch 4 --seq-len 4096 --steps "$STEPS" >> "$OUT/fla_train.jsonl" 2>> "$OUT/fla_train.err"
  done
) &
fla_pid=$!

bash bench/build_gpu.sh "$OUT" || exit 1
echo "build: $((SECONDS - start)) s"
wait "$fla_pid"; echo "fla models done: $((SECONDS - start)) s"; grep -E "step|Error" "$OUT/fla_train.err" | tail -6

L=./build-gpu/bin/linac
common=(--preset 340m --schedule 3:1 --device cuda --lr 3e-4 --log-every 1 --eval-every 100000 --checkpoint-every 100000)
for v in gated_deltanet gla; do
  rm -rf "/tmp/run-$v"
  timeout 240 $L train "specs/$v.yaml" "${common[@]}" --batch 4 --seq-len 4096 --steps $((STEPS + 2)) \
    --out "/tmp/run-$v" > "$OUT/linac_train_$v.log" 2>&1
  echo "linac train $v rc=$? ($((SECONDS - start)) s)"; grep -E "parameters|step .*tok/s" "$OUT/linac_train_$v.log" | tail -3
  cp "/tmp/run-$v/metrics.jsonl" "$OUT/linac_metrics_$v.jsonl" 2>/dev/null
done

rm -rf /tmp/run-long
timeout 300 $L train specs/gated_deltanet.yaml "${common[@]}" --batch 1 --seq-len 2048 --steps 200 --log-every 20 \
  --out /tmp/run-long > "$OUT/linac_train_200.log" 2>&1
echo "linac 200 steps rc=$? ($((SECONDS - start)) s)"; grep -E "step 200|done|nan|NaN|error" "$OUT/linac_train_200.log" | tail -4

WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 timeout 120 \
  $L train specs/gated_deltanet.yaml --preset tiny --device cuda --steps 20 --out /tmp/run-nccl > /tmp/nccl.log 2>&1
echo "nccl world size 1 rc=$?"; grep -E "data parallel|step 20|done|error" /tmp/nccl.log | tail -4
python3 bench/train_summary.py "$OUT" | tee "$OUT/train_table.txt"
