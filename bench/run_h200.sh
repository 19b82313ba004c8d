#!/usr/bin/env bash
# One device call: kernels, training and the fla side-by-side, most important first, each phase
# bounded so the summary prints inside the call's limit.
#  build      linac's runtime with CUDA (no MLIR there; committed generated/), NCCL included.
#             Meanwhile fla's 340m hybrid (bench/fla_model_bench.py) trains and is timed, the GPU
#             otherwise idle; then fla's ops compile and autotune (untimed) in the background.
#  verify     every spec on CUDA against the float64 oracle (fp32 + bf16, all sections).
#  train      `linac train --preset 340m` Gated DeltaNet 3:1 and GLA 3:1, B=4 T=4096 bf16, byte
#             vocabulary (as fla's side); a 200-step 340m run that must end without NaN; the NCCL
#             path at world size 1 (torchrun-style environment).
#  bench      `linac bench` for every variant, then fla's ops are timed (go signal), so each side
#             has the GPU to itself while it is timed.
# linac's training rows may be slowed by fla's background compiles (conservative for linac).
# RUN_LAB=1 also runs the CUDA kernel lab (sanitizers + oracle table) beside the build.
# Results under $OUT (at most 8 files come back). fla's wheels must be unpacked in .fla/site.
# Usage: bash bench/run_h200.sh [seconds]   (the whole call's budget, default 570)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT" build-gpu
export TRITON_CACHE_DIR=$PWD/build-gpu/triton-cache PYTHONUNBUFFERED=1
BUDGET=${1:-570}
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
# Bounded phase: run "$@" with at most min($1, time left - reserve) seconds.
phase() { local t=$1; shift; local l=$(( $(left) - 40 )); [ "$l" -lt "$t" ] && t=$l; [ "$t" -gt 5 ] || return 124; timeout "$t" "$@"; }
GO=/tmp/linac-fla-go; MODELS_DONE=/tmp/linac-fla-models-done; SUM=/tmp/linac-train-summary
rm -rf "$SUM"; mkdir -p "$SUM"
rm -f "$GO" "$MODELS_DONE" /tmp/fla_train.err /tmp/fla_bench.err /tmp/linac_bench.txt "$OUT"/*.jsonl "$OUT/logs.txt"
(
  for v in gated_deltanet gla; do
    PYTHONPATH=.fla/site timeout 170 python3 bench/fla_model_bench.py --variant "$v" \
      --batch 4 --seq-len 4096 --warmup 2 --steps 4 >> "$OUT/fla_train.jsonl" 2>> /tmp/fla_train.err
  done
  touch "$MODELS_DONE"
  PYTHONPATH=.fla/site exec python3 bench/fla_bench.py --go-file "$GO" > "$OUT/fla_bench.jsonl" 2> /tmp/fla_bench.err
) &
fla_pid=$!
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
  phase 60 $L verify "$s" --backend cuda --shapes "2,150,2,64,128;1,130,1,256,128" > /tmp/verify_one.log 2>&1
  echo "verify cuda $n rc=$? $(tail -1 /tmp/verify_one.log)"
  grep -E "FAIL" /tmp/verify_one.log | head -3
  cat /tmp/verify_one.log >> "$OUT/verify.log"
done
echo "verify done: $((SECONDS - start)) s"

# fla's models are timed with the GPU to themselves: wait for them (bounded).
for _ in $(seq 200); do [ -e "$MODELS_DONE" ] && break; [ "$(left)" -gt 300 ] || break; sleep 1; done
echo "fla models done: $((SECONDS - start)) s"; grep -E "step [0-9]+:|Error" /tmp/fla_train.err | tail -4

common=(--preset 340m --schedule 3:1 --device cuda --lr 3e-4 --eval-every 100000 --checkpoint-every 100000)
: > "$OUT/train.log"
for v in gated_deltanet gla; do
  rm -rf "/tmp/run-$v"
  phase 90 $L train "specs/$v.yaml" "${common[@]}" --batch 4 --seq-len 4096 --steps 7 --log-every 1 \
    --out "/tmp/run-$v" > "/tmp/linac_train_$v.log" 2>&1
  echo "linac train $v rc=$? ($((SECONDS - start)) s)"; grep -E "parameters|step .*tok/s|error" "/tmp/linac_train_$v.log" | tail -2
  cp "/tmp/linac_train_$v.log" "$SUM/"; cp "/tmp/run-$v/metrics.jsonl" "$SUM/linac_metrics_$v.jsonl" 2>/dev/null
  cat "/tmp/linac_train_$v.log" >> "$OUT/train.log"
done
rm -rf /tmp/run-long
phase 120 $L train specs/gated_deltanet.yaml "${common[@]}" --batch 1 --seq-len 2048 --steps 200 --log-every 25 \
  --out /tmp/run-long > /tmp/linac_train_200.log 2>&1
echo "linac 340m 200 steps rc=$? ($((SECONDS - start)) s)"; grep -E "step 200/|done|nan|error" /tmp/linac_train_200.log | tail -3
cat /tmp/linac_train_200.log >> "$OUT/train.log"
WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 phase 60 \
  $L train specs/gated_deltanet.yaml --preset tiny --device cuda --steps 20 --out /tmp/run-nccl > /tmp/nccl.log 2>&1
echo "nccl world size 1 rc=$?"; grep -E "data parallel|step 20/|done|error" /tmp/nccl.log | tail -3
cat /tmp/nccl.log >> "$OUT/train.log"

for _ in $(seq 60); do grep -q "warmed sdpa" /tmp/fla_bench.err 2>/dev/null && break; kill -0 "$fla_pid" 2>/dev/null || break; sleep 1; done
echo "fla ops warmed (or given up): $((SECONDS - start)) s"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); { [ "$n" = attention ] || [ "$n" = gated_delta_diag ]; } && continue
  phase 30 $L bench "$s" --backend cuda --json "$OUT/linac_bench.jsonl" >> /tmp/linac_bench.txt 2>&1 \
    || echo "bench $n failed or timed out"
done
echo "linac bench done: $((SECONDS - start)) s"

touch "$GO"
for _ in $(seq 200); do kill -0 "$fla_pid" 2>/dev/null || break; [ "$(left)" -gt 15 ] || break; sleep 1; done
kill "$fla_pid" 2>/dev/null; echo "fla bench stopped at $((SECONDS - start)) s"
# compute-sanitizer memcheck over the new backward paths through verify (small shapes), if time is left.
for n in gla gated_deltanet retnet; do
  phase 40 compute-sanitizer --tool memcheck --error-exitcode 9 $L verify "specs/$n.yaml" --backend cuda \
    --shapes "1,100,1,64,64" --dtypes bf16 > /tmp/memcheck.log 2>&1
  echo "memcheck verify $n rc=$? $(grep -E "ERROR SUMMARY" /tmp/memcheck.log | tail -1)"
  cat /tmp/memcheck.log >> "$OUT/logs.txt"
done
[ -n "${lab_pid:-}" ] && { kill "$lab_pid" 2>/dev/null; cat "$LAB"/run.log "$LAB"/sanitizer.log >> "$OUT/train.log" 2>/dev/null; }
cat /tmp/fla_train.err /tmp/fla_bench.err /tmp/linac_bench.txt >> "$OUT/logs.txt" 2>/dev/null
cp "$OUT/fla_train.jsonl" "$SUM/" 2>/dev/null
python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
python3 bench/train_summary.py "$SUM" | tee -a "$OUT/table.txt"
