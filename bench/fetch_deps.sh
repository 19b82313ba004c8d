#!/usr/bin/env bash
# Fetches, on this (networked) machine, what the H200 calls carry and the GPU machine cannot
# download: the CUTLASS 4.2 headers' wheel for the Hopper stages (.deps/, bench/cutlass_include.sh)
# and fla's wheels for the side-by-side timings (.fla/site, unpacked). Both folders are ignored by
# git; name them in the device call's carry list. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
CUTLASS_VERSION=4.2.0.0
FLA_VERSION=0.6.0
mkdir -p .deps .fla/site
if ! ls .deps/nvidia_cutlass-"$CUTLASS_VERSION"-*.whl > /dev/null 2>&1; then
  python3 -m pip download -q --no-deps "nvidia-cutlass==$CUTLASS_VERSION" -d .deps
fi
if [ ! -d .fla/site/fla ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps "flash-linear-attention==$FLA_VERSION" "fla-core==$FLA_VERSION" -d "$tmp"
  for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" .fla/site; done
  rm -rf "$tmp"
fi
# GoogleTest's sources (Debian's googletest package, installed with libgtest-dev by tools/setup.sh)
# for the GPU tests' build on the H200, whose image has no GoogleTest (run_h200.sh gputests)
if [ ! -f .deps/googletest/CMakeLists.txt ] && [ -f /usr/src/googletest/CMakeLists.txt ]; then
  cp -r /usr/src/googletest .deps/googletest
fi
echo "carry: .deps/$(basename .deps/nvidia_cutlass-*.whl) .fla/site (gputests: also .deps/googletest)"
