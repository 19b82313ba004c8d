#!/bin/sh
# Pins the device maps that `linac compile` emits for Gated DeltaNet (generated/<v>/<v>_cuda.cu):
# strided operands, the partials kernel, the launchers and the registration; the fused-prologue
# plan and Roles policy (GDN: q / k normalised in the kernel; HGRN2: tied keys computed; HGRN: not
# fused); the layer description in the registration; and that an operand name that would shadow a kernel local is rejected.
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
expect '#include "kernels/cuda/chunk_fused.cuh"'
expect '  static constexpr bool kNormQ = true, kNormK = true;'
expect '  static constexpr bool kComputeDecay = true, kComputeBeta = true;'
expect '    return gated_deltanet::decay(at(0), at(1), at(2));'
expect '  kernels::cuda::launchFusedChunkForward<Roles>(args, stream);'
expect '    &fusedForward};'
reg="$out/gated_deltanet/gated_deltanet_register.cpp"
for line in '{.available = true,' '.qTile = "q",' '.normQ = true,' '.normK = true},' '    kLayer};' \
    '.valueDim = {.expand = 2.0},' '.beta = {.present = true},'; do
  grep -qF -- "$line" "$reg" || { echo "$reg lacks: $line" >&2; exit 1; }
done
"$linac" compile "$specs/hgrn2.yaml" --out "$out" > /dev/null
grep -qF '  static constexpr bool kComputeQ = false, kComputeK = true;' "$out/hgrn2/hgrn2_cuda.cu" || {
  echo "hgrn2's tied keys are not computed in the fused kernel" >&2; exit 1; }
"$linac" compile "$specs/hgrn.yaml" --out "$out" > /dev/null
grep -qF '// Not fused: vector state' "$out/hgrn/hgrn_register.cpp" || {
  echo "hgrn's registration does not say why it is not fused" >&2; exit 1; }
if grep -qF 'chunk_fused' "$out/hgrn/hgrn_cuda.cu"; then echo "hgrn includes the fused forward" >&2; exit 1; fi
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
