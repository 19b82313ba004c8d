#!/usr/bin/env bash
# One device call: build linac's runtime with CUDA (no MLIR there), verify every spec on CUDA
# against the float64 oracle, then time linac and fla side by side at DESIGN.md's anchor shape.
# Results under $OUT (or ./out). fla's wheels must be unpacked in .fla/site (bench/NOTES.md).
# Usage: bash bench/run_h200.sh [fla-seconds]   (fla's Triton compiles are slow: bounded)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
FLA_SECONDS=${1:-240}
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINAC_ENABLE_CUDA=ON -DLINAC_ENABLE_TESTS=OFF \
  -DLINAC_ENABLE_COMPILER=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build-gpu -j16 linac > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build: $((SECONDS - start)) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); [ "$n" = attention ] && continue
  # One log for all specs: the device tool returns at most 8 files.
  ./build-gpu/bin/linac verify "$s" --backend cuda --shapes "2,150,2,64,128" > "$OUT/verify_one.log" 2>&1
  echo "verify cuda $n rc=$? $(tail -1 "$OUT/verify_one.log")"
  cat "$OUT/verify_one.log" >> "$OUT/verify.log"; rm -f "$OUT/verify_one.log"
done
echo "verify done: $((SECONDS - start)) s"
rm -f "$OUT/linac_bench.jsonl"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); { [ "$n" = attention ] || [ "$n" = gated_delta_diag ]; } && continue
  ./build-gpu/bin/linac bench "$s" --backend cuda --json "$OUT/linac_bench.jsonl" >> "$OUT/linac_bench.txt" 2>&1 \
    || echo "bench $n failed: $(tail -2 "$OUT/linac_bench.txt")"
done
echo "linac bench done: $((SECONDS - start)) s"
PYTHONPATH=.fla/site timeout "$FLA_SECONDS" python3 bench/fla_bench.py > "$OUT/fla_bench.jsonl" 2> "$OUT/fla_bench.err"
echo "fla bench rc=$? ($((SECONDS - start)) s)"; tail -3 "$OUT/fla_bench.err"
python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
