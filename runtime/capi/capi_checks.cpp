#include "capi_checks.h"

#ifdef LINAC_KERNELS_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <sstream>

namespace linac::capi {
namespace {

const char* dtypeName(linac_dtype dtype) {
  switch (dtype) {
    case LINAC_F32: return "LINAC_F32";
    case LINAC_BF16: return "LINAC_BF16";
    case LINAC_F16: return "LINAC_F16";
    case LINAC_I64: return "LINAC_I64";
  }
  return "an unknown dtype";
}

const char* deviceName(linac_device device) {
  return device == LINAC_CPU ? "LINAC_CPU" : device == LINAC_CUDA ? "LINAC_CUDA" : "an unknown device";
}

std::string shapeText(const linac_tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
  os << "]";
  return os.str();
}

std::string expectedText(const std::vector<Dim>& shape) {
  std::ostringstream names, sizes;
  names << "[";
  sizes << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    names << (i ? ", " : "") << shape[i].name;
    sizes << (i ? ", " : "") << shape[i].size;
  }
  return names.str() + "] = " + sizes.str() + "]";
}

std::string stridesText(const linac_tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.strides[i];
  os << "]";
  return os.str();
}

bool contiguous(const linac_tensor& t) {
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

int64_t numel(const linac_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

}  // namespace

CallChecks::CallChecks(const char* function, const linac_tensor* first, const char* firstName,
                       const std::vector<const char*>& firstDims)
    : function_(function) {
  const linac_tensor& t = required(first, firstName);
  first_ = t;
  if (t.ndim < 0 || t.ndim > LINAC_MAX_DIMS)
    fail(std::string(firstName) + " has ndim " + std::to_string(t.ndim) + "; at most " +
         std::to_string(LINAC_MAX_DIMS) + " are supported");
  if (t.ndim != int(firstDims.size())) {
    std::string dims;
    for (size_t i = 0; i < firstDims.size(); ++i) dims += std::string(i ? ", " : "") + firstDims[i];
    fail(std::string(firstName) + " has " + std::to_string(t.ndim) + " dims " + shapeText(t) +
         ", expected [" + dims + "]");
  }
  if (t.dtype != LINAC_F32 && t.dtype != LINAC_BF16 && t.dtype != LINAC_F16)
    fail(std::string(firstName) + " is " + dtypeName(t.dtype) +
         "; the kernels take LINAC_F32, LINAC_BF16 or LINAC_F16");
  if (t.device != LINAC_CPU && t.device != LINAC_CUDA)
    fail(std::string(firstName) + " has device " + std::to_string(int(t.device)) +
         "; use LINAC_CPU or LINAC_CUDA");
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) fail(std::string(firstName) + " has a negative size " + shapeText(t));
    if (t.shape[i] == 0)  // an empty call has nothing to compute and no data pointers to check
      fail(std::string(firstName) + " has an empty dimension " + shapeText(t) + ": every size must be at least 1");
  }
#ifndef LINAC_KERNELS_CUDA
  if (t.device == LINAC_CUDA)
    throw UnsupportedError(std::string(function_) + ": " + firstName +
                           " is on LINAC_CUDA, but this library was built without its CUDA "
                           "backend; emit with --backends cpu,cuda and build with "
                           "-DLINAC_KERNELS_CUDA=ON");
#endif
}

kernels::DType CallChecks::dtype() const {
  return first_.dtype == LINAC_BF16 ? kernels::DType::BF16
         : first_.dtype == LINAC_F16 ? kernels::DType::F16
                                     : kernels::DType::F32;
}

const linac_tensor& CallChecks::required(const linac_tensor* t, const char* name) const {
  if (!t) fail(std::string(name) + " is NULL; this call needs it");
  return *t;
}

void CallChecks::optional(const linac_tensor* t, const char* name, Element element,
                          const std::vector<Dim>& shape) const {
  if (t) check(*t, name, element, shape);
}

void CallChecks::check(const linac_tensor& t, const char* name, Element element,
                       const std::vector<Dim>& shape) const {
  const std::string n = name;
  if (t.ndim < 0 || t.ndim > LINAC_MAX_DIMS)
    fail(n + " has ndim " + std::to_string(t.ndim) + ", expected " + expectedText(shape));
  const linac_dtype want = element == Element::Value ? first_.dtype
                           : element == Element::F32 ? LINAC_F32
                                                     : LINAC_I64;
  if (t.dtype != want)
    fail(n + " is " + dtypeName(t.dtype) + ", expected " + dtypeName(want) +
         (element == Element::Value ? " (the dtype of the call's first tensor)" : ""));
  if (t.device != first_.device)
    fail(n + " is on " + deviceName(t.device) + " but the call's first tensor is on " +
         deviceName(first_.device) + "; put every tensor of a call on one device");
  bool same = t.ndim == int(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = t.shape[i] == shape[i].size;
  if (!same) fail(n + " has shape " + shapeText(t) + ", expected " + expectedText(shape));
  if (!contiguous(t))
    fail(n + " is not row-major contiguous (strides " + stridesText(t) +
         "); the kernels read dense tensors: pass a contiguous copy");
  if (numel(t) > 0 && !t.data) fail(n + " has no data (NULL pointer)");
#ifdef LINAC_KERNELS_CUDA
  if (t.device == LINAC_CUDA && numel(t) > 0) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, t.data) != cudaSuccess ||
        (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();  // clear the sticky error of a host pointer
      fail(n + " is marked LINAC_CUDA but its data is not device memory");
    }
  }
#endif
}

std::vector<int64_t> CallChecks::sequenceOffsets(const linac_tensor& cuSeqlens, int64_t batch,
                                                 int64_t tokens) const {
  if (cuSeqlens.ndim != 1 || cuSeqlens.shape[0] < 2)
    fail("cu_seqlens has shape " + shapeText(cuSeqlens) + ", expected [N + 1] with N >= 1");
  check(cuSeqlens, "cu_seqlens", Element::I64, {{"N + 1", cuSeqlens.shape[0]}});
  if (batch != 1)
    fail("cu_seqlens packs sequences along T, so B must be 1 (got B = " + std::to_string(batch) + ")");
  std::vector<int64_t> offsets(size_t(cuSeqlens.shape[0]));
#ifdef LINAC_KERNELS_CUDA
  if (cuSeqlens.device == LINAC_CUDA) {
    const size_t bytes = offsets.size() * sizeof(int64_t);
    if (cudaMemcpy(offsets.data(), cuSeqlens.data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      fail(std::string("cu_seqlens could not be read from the device: ") +
           cudaGetErrorString(cudaGetLastError()));
  } else
#endif
    std::copy_n(static_cast<const int64_t*>(cuSeqlens.data), offsets.size(), offsets.data());
  if (offsets.front() != 0) fail("cu_seqlens[0] is " + std::to_string(offsets.front()) + ", expected 0");
  for (size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] < offsets[i - 1])
      fail("cu_seqlens decreases at index " + std::to_string(i) + " (" +
           std::to_string(offsets[i - 1]) + " then " + std::to_string(offsets[i]) +
           "); offsets must not decrease");
  if (offsets.back() != tokens)
    fail("cu_seqlens ends at " + std::to_string(offsets.back()) + ", expected T = " +
         std::to_string(tokens));
  return offsets;
}

void CallChecks::fail(const std::string& message) const {
  throw ArgumentError(std::string(function_) + ": " + message);
}

}  // namespace linac::capi
