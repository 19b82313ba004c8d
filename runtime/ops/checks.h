// Argument validation shared by the recurrence ops. Every check throws std::invalid_argument with
// the op, the argument's name, what was expected and what was passed, e.g.
//   linac::ops::recurrence: argument 'g' (decay class scalar): expected shape [2, 70, 2], got
//   [2, 70] float32 on cpu
#pragma once

#include "kernels/common/recurrence.h"

#include <torch/types.h>

#include <string>
#include <string_view>

namespace linac::ops::checks {

/// "[2, 70, 2] bfloat16 on cpu", or "an undefined tensor".
std::string describe(const torch::Tensor& t);
std::string shapeString(c10::IntArrayRef shape);
std::string_view decayName(kernels::DecayClass decay);

/// Throws std::invalid_argument("<op>: argument '<arg>': expected <expected>, got <got>").
[[noreturn]] void fail(std::string_view op, std::string_view arg, std::string_view expected,
                       std::string_view got);

void expectDefined(std::string_view op, std::string_view arg, const torch::Tensor& t);
/// `why` says which option makes the argument unused, e.g. "decay class none".
void expectUndefined(std::string_view op, std::string_view arg, const torch::Tensor& t,
                     std::string_view why);
void expectDim(std::string_view op, std::string_view arg, const torch::Tensor& t, int64_t dim);
void expectShape(std::string_view op, std::string_view arg, const torch::Tensor& t,
                 c10::IntArrayRef shape);
void expectDtype(std::string_view op, std::string_view arg, const torch::Tensor& t,
                 torch::ScalarType dtype);
/// bf16 / fp16 / fp32: the element types the kernels read and write.
void expectKernelDtype(std::string_view op, std::string_view arg, const torch::Tensor& t);
/// Any floating dtype (g, beta, u are converted to fp32).
void expectFloating(std::string_view op, std::string_view arg, const torch::Tensor& t);
void expectDevice(std::string_view op, std::string_view arg, const torch::Tensor& t,
                  const torch::Device& device);
/// CPU, or CUDA when linac was built with LINAC_ENABLE_CUDA.
void expectSupportedDevice(std::string_view op, std::string_view arg, const torch::Tensor& t);

/// Validates packed-varlen offsets against tokens [B, T]: int64, 1-D, at least two entries, on
/// the CPU or on `device`, B == 1, starting at 0, non-decreasing, ending at T. Returns a
/// contiguous CPU copy (what the CPU kernels read); undefined in, undefined out.
torch::Tensor checkCuSeqlens(std::string_view op, const torch::Tensor& cu_seqlens, int64_t batch,
                             int64_t seq_len, const torch::Device& device);

/// Whether the kernels take elements of this dtype (fp32, bf16, fp16).
bool isKernelDtype(torch::ScalarType dtype);

kernels::DType kernelDtype(torch::ScalarType dtype);

}  // namespace linac::ops::checks
