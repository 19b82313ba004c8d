#!/usr/bin/env bash
# Builds the CUDA kernel lab with plain nvcc (independent of the rest of the tree), runs
# compute-sanitizer (memcheck + racecheck) on a small case, then the full lab (correctness table and
# timings). Logs go to $OUT (device call) or build-cuda/out. Usage: bash tests/runtime/cuda/run_lab.sh
# [lab args]. Environment: LAB_BUILD_ONLY=1 builds (and prints the ptxas / SASS summaries) without
# running, e.g. on a machine with nvcc but no GPU, whose build-cuda/linac_cuda_lab can travel;
# LAB_PREBUILT=1 runs that binary instead of building (a build recompiles only the objects whose
# source, headers or flags changed); SANITIZE=0 skips compute-sanitizer, SANITIZE_TOOLS names its
# tools (default "memcheck racecheck"; synccheck, initcheck too), RACECHECK_ARGS adds racecheck's
# options and RACECHECK_REPEAT runs it N times, SANITIZE_ARGS adds the lab's switches to its runs
# (e.g. --hopper-fused-reverse, or --cases TEXT for one case). The
# Hopper stages (runtime/kernels/cuda/hopper) are built when bench/cutlass_include.sh finds CuTe.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=build-cuda
OUT=${OUT:-$B/out}
mkdir -p "$B" "$OUT"
NV=(nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Iruntime/kernels/cuda)
# the build's name, for the autotuner's cache key (autotune.cu alone reads it)
BUILD_NAME=(-DLINAC_KERNELS_BUILD="\"lab $(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)\"")
CUTE=$(bash bench/cutlass_include.sh)
hopper=()
if [ -n "$CUTE" ]; then
  NV+=(-isystem "$CUTE" -DLINAC_HAVE_HOPPER=1)
  hopper=(runtime/kernels/cuda/hopper/forward.cu runtime/kernels/cuda/hopper/forward_bf16_k64.cu
          runtime/kernels/cuda/hopper/forward_bf16_k128.cu runtime/kernels/cuda/hopper/forward_f16_k64.cu
          runtime/kernels/cuda/hopper/forward_f16_k128.cu runtime/kernels/cuda/hopper/forward_bf16_k256.cu
          runtime/kernels/cuda/hopper/forward_f16_k256.cu runtime/kernels/cuda/hopper/forward_split_bf16.cu
          runtime/kernels/cuda/hopper/forward_split_f16.cu runtime/kernels/cuda/hopper/backward.cu
          runtime/kernels/cuda/hopper/backward_bf16.cu runtime/kernels/cuda/hopper/backward_f16.cu
          runtime/kernels/cuda/hopper/backward_wide_bf16.cu runtime/kernels/cuda/hopper/backward_wide_f16.cu
          runtime/kernels/cuda/hopper/backward_delta_bf16.cu runtime/kernels/cuda/hopper/backward_delta_f16.cu
          runtime/kernels/cuda/hopper/backward_delta_wide_bf16.cu runtime/kernels/cuda/hopper/backward_delta_wide_f16.cu
          runtime/kernels/cuda/hopper/diag_grad_bf16.cu runtime/kernels/cuda/hopper/diag_grad_f16.cu)
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv || true

if [ "${LAB_PREBUILT:-0}" != 1 ]; then
echo "== build"
start=$(date +%s)
srcs=(runtime/kernels/cuda/chunk_forward.cu runtime/kernels/cuda/chunk_forward_f32.cu
      runtime/kernels/cuda/chunk_forward_bf16.cu runtime/kernels/cuda/chunk_forward_f16.cu
      runtime/kernels/cuda/recurrent_step.cu runtime/kernels/cuda/scan.cu runtime/kernels/cuda/chunk_backward.cu
      runtime/kernels/cuda/chunk_backward_additive.cu runtime/kernels/cuda/chunk_backward_fixed_dg.cu
      runtime/kernels/cuda/chunk_backward_diagonal.cu runtime/kernels/cuda/chunk_backward_diagonal_scan.cu
      runtime/kernels/cuda/chunk_backward_diagonal_dqdk.cu runtime/kernels/cuda/chunk_backward_diagonal_dv.cu
      runtime/kernels/cuda/chunk_backward_delta.cu runtime/kernels/cuda/chunk_backward_delta_prep.cu
      runtime/kernels/cuda/chunk_backward_delta_scan.cu runtime/kernels/cuda/chunk_backward_delta_dqdk.cu
      runtime/kernels/cuda/chunk_backward_delta_wy.cu runtime/kernels/cuda/workspace.cu
      runtime/kernels/cuda/autotune.cu
      "${hopper[@]}" tests/runtime/cuda/lab_common.cu tests/runtime/cuda/lab_forward.cu
      tests/runtime/cuda/lab_backward.cu tests/runtime/cuda/lab_bench.cu tests/runtime/cuda/lab_cases.cu
      tests/runtime/cuda/lab.cu)
# An object is rebuilt unless it is newer than every file its dependency list (nvcc -MMD) names
# and was compiled with these flags: a header change reaches every object that includes it.
flags="${NV[*]}"
current() {  # current SOURCE NAME
  local o="$B/$2.o" d="$B/$2.d" dep
  [ -f "$o" ] && [ -f "$d" ] && [ "$(cat "$B/$2.flags" 2>/dev/null)" = "$flags" ] || return 1
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$d"); do
    [ "$dep" -nt "$o" ] && return 1
  done
  return 0
}
pids=()
built=()
for f in "${srcs[@]}"; do
  n=$(basename "$f" .cu)
  extra=()
  [ "$n" = autotune ] && extra=("${BUILD_NAME[@]}")
  [ "$n" != autotune ] && current "$f" "$n" && continue
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-16}" ]; do sleep 1; done
  ("${NV[@]}" "${extra[@]}" -MMD -MF "$B/$n.d" -Xptxas -v -c "$f" -o "$B/$n.o" >"$B/$n.ptxas.log" 2>&1 &&
     echo "$flags" >"$B/$n.flags") &
  pids+=($!)
  built+=("$f")
done
echo "compiling ${#built[@]} of ${#srcs[@]} sources (the others are current)"
fail=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    fail=1
    n=$(basename "${built[$i]}" .cu)
    rm -f "$B/$n.flags"
    echo "compile failed: ${built[$i]}"; grep -E 'error' "$B/$n.ptxas.log" | head -30
  fi
done
[ $fail = 0 ] || exit 1
objs=()
for f in "${srcs[@]}"; do objs+=("$B/$(basename "$f" .cu).o"); done
"${NV[@]}" "${objs[@]}" -o "$B/linac_cuda_lab" || exit 1
echo "build took $(( $(date +%s) - start )) s"
cat "$B"/*.ptxas.log | grep -E 'Compiling entry|registers|spill' | paste - - - > "$OUT/ptxas.log"
grep -E 'spill (stores|loads)' "$OUT/ptxas.log" | grep -v ' 0 bytes spill stores, 0 bytes spill loads' | head || true
for o in chunk_forward_f32 chunk_forward_bf16 chunk_forward_f16 chunk_backward_additive chunk_backward_diagonal_scan chunk_backward_diagonal_dqdk chunk_backward_diagonal_dv chunk_backward_delta_prep chunk_backward_delta_scan chunk_backward_delta_dqdk chunk_backward_delta_wy forward_bf16_k64 forward_bf16_k128 forward_f16_k64 forward_f16_k128 forward_bf16_k256 backward_wide_bf16 backward_delta_bf16 backward_delta_wide_bf16 diag_grad_bf16; do
  [ -f "$B/$o.o" ] || continue
  echo "SASS $o: HMMA $(cuobjdump --dump-sass "$B/$o.o" | grep -c HMMA), HGMMA $(cuobjdump --dump-sass "$B/$o.o" | grep -c HGMMA), LDL/STL $(cuobjdump --dump-sass "$B/$o.o" | grep -cE 'LDL|STL')"
done | tee "$OUT/sass.log"
grep -h C7520 "$B"/*.ptxas.log | head -5
[ "${LAB_BUILD_ONLY:-0}" = 1 ] && exit 0
fi

if [ "${SANITIZE:-1}" = 1 ]; then
echo "== compute-sanitizer (small cases)"
: >"$OUT/sanitizer.log"
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  extra=() runs=1
  # e.g. RACECHECK_ARGS="--racecheck-report all": every hazard with both accesses' lines;
  # RACECHECK_REPEAT=N: racecheck N times (an intermittent report; with SANITIZE_ARGS="--cases ...")
  [ "$tool" = racecheck ] && read -ra extra <<< "${RACECHECK_ARGS:-}" && runs=${RACECHECK_REPEAT:-1}
  for _ in $(seq 1 "$runs"); do
    # shellcheck disable=SC2086
    timeout 180 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 "$B/linac_cuda_lab" --quick --no-bench \
      --untimed ${SANITIZE_ARGS:-} >>"$OUT/sanitizer.log" 2>&1
    echo "$tool rc=$?"; tail -3 "$OUT/sanitizer.log"
  done
done
fi

echo "== lab"
timeout 300 "$B/linac_cuda_lab" "$@" 2>&1 | tee "$OUT/lab.log"
rc=${PIPESTATUS[0]}
echo "lab rc=$rc"
grep -E 'FAIL' "$OUT/lab.log" | head -40
exit $rc
