#!/usr/bin/env bash
# Builds linac's runtime with CUDA on the GPU machine (no MLIR there: the compiler is off and the
# committed generated/ code is used) into build-gpu/. Gloo's headers, which the PyPI torch wheel
# lacks, travel in .deps/include (copied from Debian's libgloo-dev: `cp -r /usr/include/gloo
# .deps/include/`) so data-parallel training (NCCL there) is built too. The Hopper stages need CuTe:
# the nvidia-cutlass wheel carried in .deps/ (bench/cutlass_include.sh).
# Usage: bash bench/build_gpu.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-out}; mkdir -p "$LOG"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
gloo=()
[ -f .deps/include/gloo/config.h ] && gloo=(-DLINAC_GLOO_INCLUDE_DIR="$PWD/.deps/include")
cute=$(bash bench/cutlass_include.sh)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINAC_ENABLE_CUDA=ON -DLINAC_ENABLE_TESTS=OFF \
  -DLINAC_ENABLE_COMPILER=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" -DLINAC_CUTLASS_INCLUDE_DIR="$cute" "${gloo[@]}" > "$LOG/configure.log" 2>&1 \
  || { tail -30 "$LOG/configure.log"; exit 1; }
grep -E "linac:" "$LOG/configure.log" | head -10
ninja -C build-gpu -j16 linac > "$LOG/build.log" 2>&1 || { grep -E "error|FAILED" "$LOG/build.log" | head -30; exit 1; }
rm -f "$LOG/configure.log" "$LOG/build.log"
