// How a variant's prologue is fused into the chunk forward kernel: which recurrence roles the
// kernel reads as tiles of inputs, which it computes from raw operands with the generated
// functions, and which q / k inputs it L2-normalises itself (runtime/kernels/cuda/chunk_roles.cuh).
// linac-plan-fused-prologue decides it and records it on the recurrence (`fused`); the emitter
// reads it back here, writes the plan into <name>_register.cpp (runtime::FusedPlan) and the
// kernel policy into <name>_cuda.cu.
#pragma once

#include "linac/Dialect/Linac/IR/LinacOps.h"

#include <map>
#include <string>
#include <vector>

namespace linac::emit {

/// One recurrence role in the fused forward.
struct FusedRole {
  std::string tile;               // input read as a [B, T, H, d] tile; empty when computed
  std::vector<std::string> args;  // computed: the generated function's operands (spec names)
  bool normalize = false;         // tile L2-normalised in the kernel
};

struct FusedRolesPlan {
  bool available = false;
  std::string why;  // when not available: the reason, for the generated comment
  FusedRole q, k, v, decay, beta;
  bool hasDecay = false, hasBeta = false;
  std::string bonus;  // exclusive_bonus: the parameter read as u
};

/// The plan recorded on `rec` by linac-plan-fused-prologue. `roleArgs` maps each prologue role
/// with a generated function to its operands. Throws std::runtime_error when the pass has not run.
FusedRolesPlan readFusedRoles(mlir::linac::RecurrenceOp rec,
                              const std::map<std::string, std::vector<std::string>>& roleArgs);

/// The runtime::FusedPlan initialiser for <name>_register.cpp, with a comment line above it.
std::string fusedPlanInitializer(const FusedRolesPlan& plan, const std::string& name,
                                 const std::string& indent);

/// The Roles policy and the fused forward launcher for <name>_cuda.cu (empty when the plan is not
/// available), inside the variant's anonymous namespace.
std::string fusedForwardSource(const std::string& name, const FusedRolesPlan& plan);

}  // namespace linac::emit
