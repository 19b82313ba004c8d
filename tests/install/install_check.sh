#!/bin/sh
# `cmake --install` into a fresh prefix; then the installed linac runs (its shared libraries are
# found), and a project outside the tree (consumer/) finds the package, builds against its
# imported targets and runs; asking for a version the package does not provide fails.
#   install_check.sh BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR
set -eu
build=$1 source=$2 work=$3 generator=$4
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in bin/linac lib/cmake/linac/linacConfig.cmake lib/cmake/linac/linacConfigVersion.cmake \
         include/linac/Spec/Spec.h include/linac/kernels/cpu/cpu_kernels.h include/linac/kernels/common/recurrence.h; do
  [ -e "$work/prefix/$f" ] || { echo "cmake --install did not install $f" >&2; exit 1; }
done
"$work/prefix/bin/linac" help > /dev/null

configure() {  # DIR [cmake args...]
  dir=$1; shift
  cmake -S "$source/tests/install/consumer" -B "$work/$dir" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$work/prefix" "$@" > "$work/$dir.log" 2>&1
}
configure consumer || { cat "$work/consumer.log" >&2; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
"$work/consumer/consumer" "$source/specs/gla.yaml"
if configure too-new -DLINAC_CONSUMER_REQUIRES=99.0; then
  echo "find_package(linac 99.0) succeeded against version 0.x" >&2; exit 1
fi
grep -q 'version: 0\.' "$work/too-new.log" || { cat "$work/too-new.log" >&2; exit 1; }
echo "install: ok"
