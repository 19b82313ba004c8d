// `linac bench SPEC`: forward, forward+backward and decode-step timings of the spec's kernels.
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "bench/bench.h"
#include "linac/Spec/SpecParser.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

namespace linac::cli {

int runBench(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"backend", "shape", "dtype", "iters", "warmup", "json"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one SPEC file");
  spec::VariantSpec spec = spec::loadVariant(args.positional[0]);
  const runtime::VariantKernels& kernels = requireKernels(spec, args.positional[0]);
  bench::Options o;
  o.backend = args.get("backend", o.backend);
  o.dtype = args.get("dtype", o.dtype);
  o.iters = static_cast<int>(args.getInt("iters", o.iters));
  o.warmup = static_cast<int>(args.getInt("warmup", o.warmup));
  if (o.iters < 1 || o.warmup < 0) throw UsageError("--iters must be >= 1 and --warmup >= 0");
  if (args.has("shape")) {
    std::vector<long long> v;
    std::stringstream ss(args.get("shape", ""));
    std::string part;
    while (std::getline(ss, part, ',')) {
      try {
        v.push_back(std::stoll(part));
      } catch (const std::exception&) {
        v.push_back(0);
      }
    }
    if (v.size() != 4 || *std::min_element(v.begin(), v.end()) <= 0)
      throw UsageError("--shape must be B,T,H,D (four positive integers), got '" + args.get("shape", "") + "'");
    o.batch = v[0], o.seqLen = v[1], o.heads = v[2], o.headDim = v[3];
  }
  auto timings = bench::run(spec, kernels, o);
  std::ofstream json;
  if (args.has("json")) {
    json.open(args.get("json", ""), std::ios::app);
    if (!json) throw UsageError("cannot open --json file '" + args.get("json", "") + "'");
  }
  bench::print(spec.name, o, timings, std::cout, args.has("json") ? &json : nullptr);
  return 0;
}

}  // namespace linac::cli
