#!/usr/bin/env bash
# Builds the CUDA kernel lab with plain nvcc (independent of the rest of the tree), runs
# compute-sanitizer (memcheck + racecheck) on a small case, then the full lab (correctness table and
# timings). Logs go to $OUT (device call) or build-cuda/out. Usage: bash tests/runtime/cuda/run_lab.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=build-cuda
OUT=${OUT:-$B/out}
mkdir -p "$B" "$OUT"
NV=(nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Iruntime/kernels/cuda)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv || true

echo "== build"
start=$(date +%s)
srcs=(runtime/kernels/cuda/chunk_forward.cu runtime/kernels/cuda/chunk_forward_f32.cu
      runtime/kernels/cuda/chunk_forward_bf16.cu runtime/kernels/cuda/chunk_forward_f16.cu
      runtime/kernels/cuda/recurrent_step.cu runtime/kernels/cuda/scan.cu runtime/kernels/cuda/chunk_backward.cu
      runtime/kernels/cuda/chunk_backward_additive.cu
      runtime/kernels/cuda/chunk_backward_diagonal.cu
      runtime/kernels/cuda/chunk_backward_delta.cu
      tests/runtime/cuda/lab.cu)
pids=()
for f in "${srcs[@]}"; do
  n=$(basename "$f" .cu)
  ("${NV[@]}" -Xptxas -v -c "$f" -o "$B/$n.o" >"$B/$n.ptxas.log" 2>&1) &
  pids+=($!)
done
fail=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    fail=1
    n=$(basename "${srcs[$i]}" .cu)
    echo "compile failed: ${srcs[$i]}"; grep -E 'error' "$B/$n.ptxas.log" | head -30
  fi
done
[ $fail = 0 ] || exit 1
"${NV[@]}" "$B"/{chunk_forward,chunk_forward_f32,chunk_forward_bf16,chunk_forward_f16,recurrent_step,scan,chunk_backward,chunk_backward_additive,chunk_backward_diagonal,chunk_backward_delta,lab}.o -o "$B/linac_cuda_lab" || exit 1
echo "build took $(( $(date +%s) - start )) s"
cat "$B"/*.ptxas.log | grep -E 'Compiling entry|registers|spill' | paste - - - > "$OUT/ptxas.log"
grep -E 'spill (stores|loads)' "$OUT/ptxas.log" | grep -v ' 0 bytes spill stores, 0 bytes spill loads' | head || true
for o in chunk_forward_f32 chunk_forward_bf16 chunk_forward_f16 chunk_backward_additive chunk_backward_diagonal chunk_backward_delta; do
  echo "SASS $o: HMMA $(cuobjdump --dump-sass "$B/$o.o" | grep -c HMMA), HGMMA $(cuobjdump --dump-sass "$B/$o.o" | grep -c HGMMA), LDL/STL $(cuobjdump --dump-sass "$B/$o.o" | grep -cE 'LDL|STL')"
done | tee "$OUT/sass.log"

echo "== compute-sanitizer (small cases)"
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/linac_cuda_lab" --quick --no-bench >"$OUT/sanitizer.log" 2>&1
echo "memcheck rc=$?"; tail -4 "$OUT/sanitizer.log"
timeout 180 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/linac_cuda_lab" --quick --no-bench >>"$OUT/sanitizer.log" 2>&1
echo "racecheck rc=$?"; tail -3 "$OUT/sanitizer.log"

echo "== lab"
timeout 300 "$B/linac_cuda_lab" "$@" 2>&1 | tee "$OUT/lab.log"
rc=${PIPESTATUS[0]}
echo "lab rc=$rc"
grep -E 'FAIL' "$OUT/lab.log" | head -40
exit $rc
