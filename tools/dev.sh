#!/usr/bin/env bash
# One entry point for a fresh machine (README.md's two commands, and CI through .ci/run).
#   tools/dev.sh demo   install, build linac, compile every spec, print one's IR, train a tiny hybrid on the CPU
#   tools/dev.sh test   install, build, run the whole test suite and `linac compile --check`
#   tools/dev.sh build  install and build only
# Environment: BUILD_DIR (default build), JOBS (default 2), LINAC_SKIP_SETUP=1 to skip installs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}

setup() {
  [ "${LINAC_SKIP_SETUP:-0}" = 1 ] || bash tools/setup.sh
}

# configure_and_build [TARGET...]: configure once, then build the targets named (default: all).
configure_and_build() {
  local torch_prefix
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="/usr/lib/llvm-22;${torch_prefix}" \
      -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
  fi
  local start=$SECONDS
  ninja -C "$BUILD_DIR" -j "$JOBS" "$@"
  echo "build: $((SECONDS - start)) s"
}

case "${1:-}" in
  build)
    setup; configure_and_build ;;
  demo)
    # The main job: compile every spec (to a scratch folder: generated/ is what the build uses),
    # show one's optimised IR, then train a tiny Gated DeltaNet 3:1 hybrid on the embedded corpus.
    # Only the linac executable is built (no test targets): what the demo runs.
    setup; configure_and_build linac
    out=$(mktemp -d)
    for spec in specs/*.yaml; do
      "$BUILD_DIR/bin/linac" compile "$spec" --out "$out" > /dev/null
    done
    echo "compiled every spec into $out"
    echo "== linac compile specs/gated_deltanet.yaml --emit=ir-opt"
    "$BUILD_DIR/bin/linac" compile specs/gated_deltanet.yaml --emit=ir-opt
    echo "== linac train specs/gated_deltanet.yaml --schedule 3:1 --preset tiny"
    "$BUILD_DIR/bin/linac" train specs/gated_deltanet.yaml --schedule 3:1 --preset tiny --device cpu \
      --out "${RUN_DIR:-runs/gated_deltanet-3to1-tiny}" --overwrite ;;
  test)
    setup; configure_and_build
    start=$SECONDS
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE gpu
    "$BUILD_DIR/bin/linac" compile --check
    echo "tests: $((SECONDS - start)) s" ;;
  *)
    echo "usage: tools/dev.sh demo|test|build" >&2; exit 2 ;;
esac
