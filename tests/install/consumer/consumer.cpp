// Built against an installed linac (tests/install): parses the spec given as argv[1] with
// linac::spec and runs one token of a plain linear-attention recurrence through
// linac::kernels_cpu, checked by hand: S = k v^T, so o = scale (q . k) v.
#include "kernels/cpu/cpu_kernels.h"
#include "linac/Spec/SpecParser.h"

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer SPEC\n");
    return 2;
  }
  const linac::spec::VariantSpec spec = linac::spec::loadVariant(argv[1]);
  namespace k = linac::kernels;
  const float q[2] = {1.0f, 2.0f}, key[2] = {0.5f, -1.0f}, v[2] = {3.0f, 4.0f};  // [1, 1, 1, 2]
  float o[2] = {0.0f, 0.0f};
  k::RecurrenceShape shape{1, 1, 1, 2, 2, nullptr, 1};
  k::RecurrenceForwardArgs args;
  args.q = q, args.k = key, args.v = v, args.scale = 0.5f, args.o = o;
  k::cpu::chunkForward(k::RecurrenceKind{}, shape, args, k::DType::F32);
  const float qk = 0.5f * (q[0] * key[0] + q[1] * key[1]);
  const bool ok = std::abs(o[0] - qk * v[0]) < 1e-6f && std::abs(o[1] - qk * v[1]) < 1e-6f;
  std::printf("%s: %s (o = %g, %g)\n", spec.name.c_str(), ok ? "ok" : "WRONG", o[0], o[1]);
  return ok ? 0 : 1;
}
