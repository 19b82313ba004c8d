#include "checks.h"

#include <sstream>
#include <stdexcept>

namespace linac::ops::checks {

std::string shapeString(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string describe(const torch::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream out;
  out << shapeString(t.sizes()) << ' ' << c10::toString(t.scalar_type()) << " on " << t.device();
  return out.str();
}

std::string_view decayName(kernels::DecayClass decay) {
  switch (decay) {
    case kernels::DecayClass::None:
      return "none";
    case kernels::DecayClass::Fixed:
      return "fixed";
    case kernels::DecayClass::Scalar:
      return "scalar";
    case kernels::DecayClass::Diagonal:
      return "diagonal";
  }
  return "?";
}

void fail(std::string_view op, std::string_view arg, std::string_view expected,
          std::string_view got) {
  std::string message;
  message.append(op).append(": argument '").append(arg).append("': expected ");
  message.append(expected).append(", got ").append(got);
  throw std::invalid_argument(message);
}

void expectDefined(std::string_view op, std::string_view arg, const torch::Tensor& t) {
  if (!t.defined()) fail(op, arg, "a defined tensor", describe(t));
}

void expectUndefined(std::string_view op, std::string_view arg, const torch::Tensor& t,
                     std::string_view why) {
  if (t.defined()) {
    fail(op, arg, "an undefined tensor (unused with " + std::string(why) + ")", describe(t));
  }
}

void expectDim(std::string_view op, std::string_view arg, const torch::Tensor& t, int64_t dim) {
  expectDefined(op, arg, t);
  if (t.dim() != dim) fail(op, arg, std::to_string(dim) + " dimensions", describe(t));
}

void expectShape(std::string_view op, std::string_view arg, const torch::Tensor& t,
                 c10::IntArrayRef shape) {
  expectDefined(op, arg, t);
  if (t.sizes() != shape) fail(op, arg, "shape " + shapeString(shape), describe(t));
}

void expectDtype(std::string_view op, std::string_view arg, const torch::Tensor& t,
                 torch::ScalarType dtype) {
  expectDefined(op, arg, t);
  if (t.scalar_type() != dtype)
    fail(op, arg, std::string("dtype ") + c10::toString(dtype), describe(t));
}

void expectKernelDtype(std::string_view op, std::string_view arg, const torch::Tensor& t) {
  expectDefined(op, arg, t);
  if (!isKernelDtype(t.scalar_type())) fail(op, arg, "dtype BFloat16, Half or Float", describe(t));
}

void expectFloating(std::string_view op, std::string_view arg, const torch::Tensor& t) {
  expectDefined(op, arg, t);
  if (!c10::isFloatingType(t.scalar_type())) fail(op, arg, "a floating dtype", describe(t));
}

void expectDevice(std::string_view op, std::string_view arg, const torch::Tensor& t,
                  const torch::Device& device) {
  expectDefined(op, arg, t);
  if (t.device() != device) {
    fail(op, arg, "device " + device.str() + " (the device of q / x)", describe(t));
  }
}

void expectSupportedDevice(std::string_view op, std::string_view arg, const torch::Tensor& t) {
  expectDefined(op, arg, t);
  if (t.is_cpu()) return;
#ifdef LINAC_HAVE_CUDA
  if (t.is_cuda()) return;
  fail(op, arg, "a CPU or CUDA tensor", describe(t));
#else
  if (t.is_cuda()) fail(op, arg, "a CPU tensor (linac was built without CUDA)", describe(t));
  fail(op, arg, "a CPU tensor", describe(t));
#endif
}

torch::Tensor checkCuSeqlens(std::string_view op, const torch::Tensor& cu_seqlens, int64_t batch,
                             int64_t seq_len, const torch::Device& device) {
  constexpr std::string_view arg = "cu_seqlens";
  if (!cu_seqlens.defined()) return {};
  expectDtype(op, arg, cu_seqlens, torch::kLong);
  expectDim(op, arg, cu_seqlens, 1);
  if (cu_seqlens.numel() < 2) fail(op, arg, "at least 2 offsets [N + 1]", describe(cu_seqlens));
  if (!cu_seqlens.is_cpu() && cu_seqlens.device() != device) {
    fail(op, arg, "the CPU or device " + device.str(), describe(cu_seqlens));
  }
  if (batch != 1) {
    fail(op, arg, "batch size 1 with packed sequences (q / x of shape [1, T, ...])",
         "batch size " + std::to_string(batch));
  }
  torch::Tensor host = cu_seqlens.to(torch::kCPU).contiguous();
  const int64_t* offsets = host.data_ptr<int64_t>();  // [N + 1]
  const int64_t n = host.numel() - 1;
  if (offsets[0] != 0)
    fail(op, arg, "first offset 0", "first offset " + std::to_string(offsets[0]));
  for (int64_t i = 0; i < n; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      fail(op, arg, "non-decreasing offsets",
           "offset " + std::to_string(offsets[i + 1]) + " after " + std::to_string(offsets[i]));
    }
  }
  if (offsets[n] != seq_len) {
    fail(op, arg, "last offset " + std::to_string(seq_len) + " (the token count T)",
         "last offset " + std::to_string(offsets[n]));
  }
  return host;
}

bool isKernelDtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kHalf;
}

kernels::DType kernelDtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat:
      return kernels::DType::F32;
    case torch::kBFloat16:
      return kernels::DType::BF16;
    case torch::kHalf:
      return kernels::DType::F16;
    default:
      break;
  }
  throw std::invalid_argument(std::string("linac::ops: no kernel element type for dtype ") +
                              c10::toString(dtype));
}

}  // namespace linac::ops::checks
