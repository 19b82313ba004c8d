// Argument checks of the C API: every tensor against the shape, dtype, device and layout the
// recurrence contract asks for, with messages that name the C function and the argument.
#pragma once

#include "linac_capi.h"

#include "kernels/common/recurrence.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac::capi {

/// A bad argument: reported as LINAC_INVALID_ARGUMENT with this message.
class ArgumentError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// A backend this library was built without: LINAC_UNSUPPORTED.
class UnsupportedError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What a tensor's dtype must be: the call's element type (q's), fp32, or int64.
enum class Element { Value, F32, I64 };

/// One named dimension of an expected shape, e.g. {"B", 2}.
struct Dim {
  const char* name;
  int64_t size;
};

/// Checks the tensors of one call: all on `device`, the element type fixed by the first value
/// tensor (q or x).
class CallChecks {
public:
  CallChecks(const char* function, const linac_tensor* first, const char* firstName,
             const std::vector<const char*>& firstDims);

  /// The first tensor's sizes (by position) and the call's element type and device.
  int64_t size(int dim) const { return first_.shape[dim]; }
  kernels::DType dtype() const;
  linac_device device() const { return first_.device; }

  /// Throws ArgumentError when `t` is null.
  const linac_tensor& required(const linac_tensor* t, const char* name) const;
  /// Shape, dtype, device, contiguity and a non-null data pointer.
  void check(const linac_tensor& t, const char* name, Element element,
             const std::vector<Dim>& shape) const;
  /// check() when t is non-null.
  void optional(const linac_tensor* t, const char* name, Element element,
                const std::vector<Dim>& shape) const;
  /// Reads cu_seqlens (from the device on CUDA) and checks 0 = c_0 <= c_1 <= ... <= c_N = T
  /// with B == 1. Returns the offsets.
  std::vector<int64_t> sequenceOffsets(const linac_tensor& cuSeqlens, int64_t batch,
                                       int64_t tokens) const;

  /// "linac_gla_forward: " + message, as an ArgumentError.
  [[noreturn]] void fail(const std::string& message) const;

private:
  const char* function_;
  linac_tensor first_;
};

}  // namespace linac::capi
