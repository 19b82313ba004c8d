#include "verify/verify.h"

#include "verify/sections.h"

#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>

namespace linac::verify {

std::string Shape::text() const {
  std::ostringstream os;
  os << "B=" << batch << " T=" << seqLen << " H=" << heads << " dk=" << keyDim << " dv=" << valueDim;
  return os.str();
}

Shape parseShape(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || x <= 0)
      throw std::invalid_argument("shape '" + text + "': '" + part + "' is not a positive integer");
    v.push_back(x);
  }
  if (v.size() != 5)
    throw std::invalid_argument("shape '" + text + "' must be B,T,H,dk,dv (five positive integers)");
  return Shape{v[0], v[1], v[2], v[3], v[4]};
}

double tolerance(kernels::DType dtype) { return dtype == kernels::DType::F32 ? 1e-5 : 5e-3; }

bool Report::passed() const { return failures() == 0; }

int Report::failures() const {
  int n = 0;
  for (const auto& c : checks) n += !c.passed();
  return n;
}

Report run(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels, const Options& options,
           std::ostream& log) {
  if (options.backend != "cpu" && options.backend != "cuda")
    throw std::invalid_argument("unknown backend '" + options.backend + "'; valid: cpu, cuda");
  if (options.backend == "cuda" && !torch::cuda::is_available())
    throw std::invalid_argument("--backend cuda: no CUDA device is available to this process");
  Report report;
  report.seed = options.seed ? options.seed : std::random_device{}();
  torch::manual_seed(report.seed);
  log << "linac verify " << spec.name << " (" << options.backend << ", seed " << report.seed << ")" << std::endl;
  for (const Shape& shape : options.shapes)
    for (kernels::DType dtype : options.dtypes) {
      detail::kernelSection(report, kernels, shape, dtype, options, log);
      detail::specSection(report, spec, kernels, shape, dtype, options, log);
      detail::fusedSection(report, spec, kernels, shape, dtype, options, log);
      detail::consistencySection(report, kernels, shape, dtype, options, log);
    }
  return report;
}

void printReport(const Report& report, std::ostream& os) {
  os << std::left << std::setw(12) << "section" << std::setw(22) << "check" << std::setw(50) << "setting"
     << std::right << std::setw(11) << "rel-RMS" << std::setw(10) << "tol" << "  result\n";
  for (const auto& c : report.checks) {
    os << std::left << std::setw(12) << c.section << std::setw(22) << c.what << std::setw(50) << c.setting
       << std::right;
    if (!c.ran) {
      os << std::setw(11) << "-" << std::setw(10) << "-" << "  NOT RUN (" << c.note << ")\n";
      continue;
    }
    os << std::setw(11) << std::scientific << std::setprecision(2) << c.error << std::setw(10) << c.tolerance
       << std::defaultfloat << "  " << (c.passed() ? "PASS" : "FAIL");
    if (!c.note.empty()) os << " (" << c.note << ")";
    os << "\n";
  }
  int notRun = 0;
  for (const auto& c : report.checks) notRun += !c.ran;
  os << (report.passed() ? "PASS" : "FAIL") << ": " << report.checks.size() - report.failures() - notRun
     << " passed, " << report.failures() << " failed, " << notRun << " not run (seed " << report.seed
     << ")\n";
}

}  // namespace linac::verify
