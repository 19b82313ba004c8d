#!/usr/bin/env bash
# One device call for the kernels: build linac's runtime with CUDA (no MLIR there), run the CUDA
# kernel lab (compute-sanitizer + oracle table), verify every spec on CUDA against the float64
# oracle, then time linac and fla side by side at DESIGN.md's anchor shape.
# fla's Triton compiles start first, in the background, overlapping the build; fla waits for a
# go signal before timing, so each side has the GPU to itself while it is timed.
# Results under $OUT (at most 8 files come back). fla's wheels must be unpacked in .fla/site.
# Usage: bash bench/run_h200.sh [budget-seconds for fla after linac is done]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
FLA_SECONDS=${1:-120}
GO=/tmp/linac-fla-go; rm -f "$GO"
start=$SECONDS
PYTHONPATH=.fla/site PYTHONUNBUFFERED=1 python3 bench/fla_bench.py --go-file "$GO" \
  > "$OUT/fla_bench.jsonl" 2> "$OUT/fla_bench.err" &
fla_pid=$!

# The kernel lab builds itself with plain nvcc: it runs beside linac's build (its timings are
# not the ones reported; linac bench's are). Its logs are folded into one file at the end.
LAB=/tmp/linac-lab; mkdir -p "$LAB"
OUT=$LAB timeout 420 bash tests/runtime/cuda/run_lab.sh > "$LAB/run.log" 2>&1 &
lab_pid=$!

bash bench/build_gpu.sh "$OUT" || exit 1
echo "build: $((SECONDS - start)) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

: > "$OUT/verify.log"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); [ "$n" = attention ] && continue
  timeout 120 ./build-gpu/bin/linac verify "$s" --backend cuda --shapes "2,150,2,64,128" > /tmp/verify_one.log 2>&1
  echo "verify cuda $n rc=$? $(tail -1 /tmp/verify_one.log)"
  grep -E "FAIL" /tmp/verify_one.log | head -5
  cat /tmp/verify_one.log >> "$OUT/verify.log"
done
echo "verify done: $((SECONDS - start)) s"
wait "$lab_pid"; echo "lab rc=$? ($((SECONDS - start)) s)"
grep -E "memcheck rc|racecheck rc|lab rc|SASS|spill|FAIL" "$LAB/run.log" | head -30
cat "$LAB"/run.log "$LAB"/sanitizer.log "$LAB"/ptxas.log > "$OUT/lab.log" 2>/dev/null

# fla's autotuning times kernels on this GPU: let it finish before linac is timed.
for _ in $(seq 300); do grep -q "warmed sdpa" "$OUT/fla_bench.err" 2>/dev/null && break; kill -0 "$fla_pid" 2>/dev/null || break; sleep 1; done
echo "fla warm-up done or given up: $((SECONDS - start)) s"
rm -f "$OUT/linac_bench.jsonl"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); { [ "$n" = attention ] || [ "$n" = gated_delta_diag ]; } && continue
  timeout 120 ./build-gpu/bin/linac bench "$s" --backend cuda --json "$OUT/linac_bench.jsonl" >> "$OUT/linac_bench.txt" 2>&1 \
    || echo "bench $n failed: $(tail -2 "$OUT/linac_bench.txt")"
done
echo "linac bench done: $((SECONDS - start)) s"

touch "$GO"
( sleep "$FLA_SECONDS"; kill "$fla_pid" 2>/dev/null ) & killer=$!
wait "$fla_pid"; echo "fla bench rc=$? ($((SECONDS - start)) s)"; kill "$killer" 2>/dev/null
grep -E "warmed|Error" "$OUT/fla_bench.err" | head -12
python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
