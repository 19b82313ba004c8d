#!/usr/bin/env bash
# One device call: kernels, training and the fla side-by-side, each phase bounded so the summary
# prints inside the call's limit.
#  warm       fla's Triton compiles + autotuning are slow (its RetNet op alone took 120 s, and its
#             340m model did not finish one step in 170 s): one process per fla op and per fla
#             model warms Triton's cache (kernels and autotune results, TRITON_CACHE_DIR) in
#             parallel, untimed, while linac builds and verifies.
#  build      linac's runtime with CUDA (no MLIR there; committed generated/), NCCL included.
#  verify     every spec on CUDA against the float64 oracle (fp32 + bf16, all sections).
#  train      fla's 340m hybrids (bench/fla_model_bench.py) timed from the warm cache, then
#             `linac train --preset 340m` for the same Gated DeltaNet 3:1 and GLA 3:1 (B=4 T=4096
#             bf16, byte vocabulary on both sides). RUN_LONG=1 adds a 200-step 340m run, RUN_NCCL=1
#             the NCCL path at world size 1 (both measured on 2026-12-02, bench/NOTES.md).
#  bench      `linac bench` for every variant, then fla's ops timed from the warm cache.
# Each side has the GPU to itself while it is timed. Results under $OUT (8 files at most).
# fla's wheels must be unpacked in .fla/site. RUN_LAB=1 also runs the CUDA kernel lab.
# Usage: bash bench/run_h200.sh [seconds]   (the whole call's budget, default 570)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT" build-gpu
export TRITON_CACHE_DIR=$PWD/build-gpu/triton-cache PYTHONUNBUFFERED=1
BUDGET=${1:-570}
SHAPES=${VERIFY_SHAPES:-2,150,2,64,128;1,130,1,256,128}
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
# Bounded phase: run "$@" with at most min($1, time left - reserve) seconds.
phase() { local t=$1; shift; local l=$(( $(left) - 40 )); [ "$l" -lt "$t" ] && t=$l; [ "$t" -gt 5 ] || return 124; timeout "$t" "$@"; }
WARM=/tmp/linac-fla-warm; SUM=/tmp/linac-train-summary
rm -rf "$WARM" "$SUM"; mkdir -p "$WARM" "$SUM"
rm -f "$OUT"/*.jsonl "$OUT/logs.txt" /tmp/linac_bench.txt

warmers=()
for v in gated_deltanet gla; do  # autotune keys are head dims and chunk sizes, not B: B=1 is enough
  PYTHONPATH=.fla/site timeout 400 python3 bench/fla_model_bench.py --variant "$v" --batch 1 --seq-len 4096 \
    --warmup 1 --steps 0 > "$WARM/model_$v.out" 2>&1 &
  warmers+=($!)
done
for c in retnet mamba2 gla rwkv6 deltanet gated_deltanet hgrn sdpa; do
  PYTHONPATH=.fla/site timeout 400 python3 bench/fla_bench.py --only "$c" --warm-only > "$WARM/op_$c.out" 2>&1 &
  warmers+=($!)
done
if [ "${RUN_LAB:-0}" = 1 ]; then
  LAB=/tmp/linac-lab; mkdir -p "$LAB"
  OUT=$LAB timeout 420 bash tests/runtime/cuda/run_lab.sh > "$LAB/run.log" 2>&1 &
  lab_pid=$!
fi

bash bench/build_gpu.sh "$OUT" || exit 1
echo "build: $((SECONDS - start)) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
L=./build-gpu/bin/linac

: > "$OUT/verify.log"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); [ "$n" = attention ] && continue
  phase 60 $L verify "$s" --backend cuda --shapes "$SHAPES" > /tmp/verify_one.log 2>&1
  echo "verify cuda $n rc=$? $(tail -1 /tmp/verify_one.log)"
  grep -E "FAIL" /tmp/verify_one.log | head -3
  cat /tmp/verify_one.log >> "$OUT/verify.log"
done
echo "verify done: $((SECONDS - start)) s"
if [ -n "${lab_pid:-}" ]; then
  wait "$lab_pid"; echo "lab rc=$?"; grep -E "memcheck rc|racecheck rc|lab rc|FAIL" "$LAB/run.log" | head -20
  cat "$LAB"/run.log "$LAB"/sanitizer.log >> "$OUT/logs.txt" 2>/dev/null
fi

# Nothing may be timed while the warmers autotune on the GPU (bounded wait).
for p in "${warmers[@]}"; do
  while kill -0 "$p" 2>/dev/null && [ "$(left)" -gt 330 ]; do sleep 1; done
done
kill "${warmers[@]}" 2>/dev/null
echo "fla warm-up done: $((SECONDS - start)) s"; grep -hE "warmed|step 0:|Error" "$WARM"/*.out | head -12

for v in gated_deltanet gla; do
  PYTHONPATH=.fla/site phase 90 python3 bench/fla_model_bench.py --variant "$v" --batch 4 --seq-len 4096 \
    --warmup 2 --steps 4 >> "$OUT/fla_train.jsonl" 2>> "$WARM/fla_train.err"
  echo "fla model $v rc=$? ($((SECONDS - start)) s)"
done
common=(--preset 340m --schedule 3:1 --device cuda --lr 3e-4 --eval-every 100000 --checkpoint-every 100000)
: > "$OUT/train.log"
for v in gated_deltanet gla; do
  rm -rf "/tmp/run-$v"
  phase 60 $L train "specs/$v.yaml" "${common[@]}" --batch 4 --seq-len 4096 --steps 7 --log-every 1 \
    --out "/tmp/run-$v" > "$SUM/linac_train_$v.log" 2>&1
  echo "linac train $v rc=$? ($((SECONDS - start)) s)"; grep -E "step .*tok/s|error" "$SUM/linac_train_$v.log" | tail -2
  cp "/tmp/run-$v/metrics.jsonl" "$SUM/linac_metrics_$v.jsonl" 2>/dev/null
  cat "$SUM/linac_train_$v.log" >> "$OUT/train.log"
done
if [ "${RUN_LONG:-0}" = 1 ]; then
  rm -rf /tmp/run-long
  phase 120 $L train specs/gated_deltanet.yaml "${common[@]}" --batch 1 --seq-len 2048 --steps 200 --log-every 25 \
    --out /tmp/run-long > /tmp/linac_train_200.log 2>&1
  echo "linac 340m 200 steps rc=$?"; grep -E "step 200/|done|nan|error" /tmp/linac_train_200.log | tail -3
  cat /tmp/linac_train_200.log >> "$OUT/train.log"
fi
if [ "${RUN_NCCL:-0}" = 1 ]; then
  WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 phase 60 \
    $L train specs/gated_deltanet.yaml --preset tiny --device cuda --steps 20 --out /tmp/run-nccl > /tmp/nccl.log 2>&1
  echo "nccl world size 1 rc=$?"; grep -E "data parallel|step 20/|done|error" /tmp/nccl.log | tail -3
  cat /tmp/nccl.log >> "$OUT/train.log"
fi

for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); { [ "$n" = attention ] || [ "$n" = gated_delta_diag ]; } && continue
  phase 30 $L bench "$s" --backend cuda --json "$OUT/linac_bench.jsonl" >> /tmp/linac_bench.txt 2>&1 \
    || echo "bench $n failed or timed out"
done
echo "linac bench done: $((SECONDS - start)) s"
PYTHONPATH=.fla/site phase 150 python3 bench/fla_bench.py > "$OUT/fla_bench.jsonl" 2> "$WARM/fla_bench.err"
echo "fla ops rc=$? ($((SECONDS - start)) s)"

cat "$WARM"/*.out "$WARM"/*.err /tmp/linac_bench.txt >> "$OUT/logs.txt" 2>/dev/null
cp "$OUT/fla_train.jsonl" "$SUM/" 2>/dev/null
python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
python3 bench/train_summary.py "$SUM" | tee -a "$OUT/table.txt"
