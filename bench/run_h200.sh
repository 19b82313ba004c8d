#!/usr/bin/env bash
# One device call: build linac's runtime with CUDA (no MLIR there), run the GPU tests, verify
# every spec on CUDA, then time linac and fla side by side. Results under $OUT (or ./out).
# fla's wheels must be unpacked in .fla/site (see bench/NOTES.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINAC_ENABLE_CUDA=ON \
  -DLINAC_ENABLE_COMPILER=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build-gpu -j16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build: $((SECONDS - start)) s"
ctest --test-dir build-gpu -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1; echo "ctest gpu rc=$?"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); [ "$n" = attention ] && continue
  ./build-gpu/bin/linac verify "$s" --backend cuda --shapes "2,150,2,64,128;1,300,2,128,64" \
    > "$OUT/verify_$n.log" 2>&1; echo "verify cuda $n rc=$? $(tail -1 "$OUT/verify_$n.log")"
done
rm -f "$OUT/linac_bench.jsonl"
for s in specs/*.yaml; do
  n=$(basename "$s" .yaml); [ "$n" = attention ] || [ "$n" = gated_delta_diag ] && continue
  ./build-gpu/bin/linac bench "$s" --backend cuda --json "$OUT/linac_bench.jsonl" >> "$OUT/linac_bench.txt" 2>&1
done
PYTHONPATH=.fla/site python3 bench/fla_bench.py > "$OUT/fla_bench.jsonl" 2> "$OUT/fla_bench.err"
python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
