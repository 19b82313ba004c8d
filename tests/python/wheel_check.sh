#!/bin/sh
# `pip install .` of the source tree into a fresh virtual environment (which sees the system's
# torch), then wheel_test.py against that installation, run from outside the source tree.
# usage: wheel_check.sh SOURCE_DIR WORK_DIR LINAC_EXECUTABLE LAYER_DUMP_EXECUTABLE
set -eu
src=$1 work=$2 linac=$3 dump=$4
rm -rf "$work"
mkdir -p "$work"
python3 -m venv --system-site-packages "$work/venv"
# No build isolation: the build uses the scikit-build-core that tools/setup.sh installed, offline.
"$work/venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -C build-dir="$work/build" -C cmake.define.LINAC_WHEEL_CUDA=OFF "$src"
cd "$work"
LINAC_SOURCE_DIR=$src LINAC_EXECUTABLE=$linac LINAC_LAYER_DUMP=$dump LINAC_CACHE_DIR=$work/cache \
  "$work/venv/bin/python" "$src/tests/python/wheel_test.py"
