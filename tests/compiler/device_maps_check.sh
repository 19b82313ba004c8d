#!/bin/sh
# Pins the device maps that `linac compile` emits for Gated DeltaNet (generated/<v>/<v>_cuda.cu):
# strided operands, the partials kernel, the launchers and the registration; and that an operand
# name that would shadow a kernel local is rejected.
# usage: device_maps_check.sh LINAC SPECS_DIR OUT_DIR
set -eu
linac=$1 specs=$2 out=$3
rm -rf "$out"
"$linac" compile "$specs/gated_deltanet.yaml" --out "$out" > /dev/null
cu="$out/gated_deltanet/gated_deltanet_cuda.cu"
expect() {
  grep -qF -- "$1" "$cu" || { echo "$cu lacks: $1" >&2; exit 1; }
}
expect "spec sha256: $(sha256sum "$specs/gated_deltanet.yaml" | cut -d' ' -f1)"
expect '#include "prologue/device_map.cuh"'
expect '__global__ void decayForwardKernel(StridedOperand A_log, StridedOperand a, StridedOperand dt_bias,'
expect '  for (int64_t flat = firstElement(); flat < count; flat += gridStride()) {'
expect '    result[flat] = decay(load(A_log, at), load(a, at), load(dt_bias, at));'
expect '    decay_grad(load(A_log, at), load(a, at), load(dt_bias, at), &d_A_log, &d_a, &d_dt_bias);'
expect '    if (grad_A_log) grad_A_log[flat] = upstream * d_A_log;'
expect '  decayForwardKernel<<<blocksFor(count), kThreadsPerBlock, 0, stream>>>('
expect '  checkLaunch("gated_deltanet decay partials kernel");'
expect '        {"decay", &decayForward, &decayPartials},'
expect 'const runtime::DeviceRegistration kDeviceRegistration(&kDeviceMaps);'
grep -qF '"gated_deltanet_cuda.cu"' "$out/gated_deltanet/manifest.json" || {
  echo "the manifest does not list gated_deltanet_cuda.cu" >&2; exit 1; }

# An operand that would shadow a kernel local is rejected with its name, and nothing is written.
clash="$out-clash"
rm -rf "$clash" && mkdir -p "$clash"
cp -r "$specs/presets" "$clash/"
sed -E 's/\bg\b/count/g' "$specs/gated_deltanet.yaml" > "$clash/gated_deltanet.yaml"
if "$linac" compile "$clash/gated_deltanet.yaml" --out "$clash/out" 2> "$clash/err"; then
  echo "an operand named 'count' was accepted" >&2; exit 1
fi
grep -qF "operand 'count' of gated_deltanet's 'gate' prologue" "$clash/err" || { cat "$clash/err" >&2; exit 1; }
test ! -e "$clash/out"
