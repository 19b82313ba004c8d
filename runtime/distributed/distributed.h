// Data-parallel training through LibTorch's c10d (DESIGN.md section 5): a process group from a
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) over a
// c10d::TCPStore (rank 0 hosts it); Gloo on CPU, NCCL on CUDA (only when built with
// LINAC_HAVE_CUDA). Gradients are averaged in flat buckets whose allreduces overlap with backward
// (grad_reducer.h); initial parameters and buffers are broadcast from rank 0.
// ShardedStream gives each rank a disjoint slice of every global batch; launchLocalWorkers
// spawns N local ranks of the running executable (`linac train --nproc N`).
#pragma once

#include "data/data.h"

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>  // c10d's headers; Gloo's are needed only in the .cpp
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace linac::distributed {

struct DistContext {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;  // ProcessGroupGloo or ProcessGroupNCCL
  bool isMaster() const { return rank == 0; }
};

/// True when WORLD_SIZE is set in the environment (launched by torchrun or `--nproc`).
bool launchedDistributed();

/// Reads RANK, WORLD_SIZE, LOCAL_RANK (default RANK), MASTER_ADDR (default 127.0.0.1) and
/// MASTER_PORT (required); connects the TCPStore (rank 0 is the server) and creates the process
/// group: NCCL when `device` is CUDA (builds with LINAC_HAVE_CUDA only), Gloo otherwise.
/// LINAC_DIST_TIMEOUT_S (default 600) bounds the store connection and every collective.
/// Throws std::runtime_error naming the variable or the failure.
DistContext initFromEnvironment(const torch::Device& device);

/// Copies rank 0's parameters and buffers into every other rank (in place).
void broadcastParameters(torch::nn::Module& module, const DistContext& ctx);

/// Averages a tensor across ranks in place (e.g. the step's loss, for logging).
void allReduceMean(torch::Tensor& tensor, const DistContext& ctx);

void barrier(const DistContext& ctx);

/// Each rank's disjoint slice of every global batch: next(b) pulls worldSize * b rows from the
/// underlying stream and returns rows [rank * b, (rank + 1) * b). position()/seek() are the
/// underlying stream's, identical on all ranks, so a checkpoint resumes every rank consistently.
class ShardedStream : public data::TokenStream {
public:
  ShardedStream(data::TokenStream& inner, int rank, int worldSize);
  torch::Tensor next(int64_t batch) override;
  int64_t position() const override { return inner_.position(); }
  void seek(int64_t position) override { inner_.seek(position); }
  int64_t tokensPerEpoch() const override { return inner_.tokensPerEpoch(); }

private:
  data::TokenStream& inner_;
  int rank_;
  int worldSize_;
};

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close).
int freeLoopbackPort();

/// Runs `nproc` copies of the running executable (/proc/self/exe) with `args` (args[0] is
/// argv[0]) and RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port),
/// OMP_NUM_THREADS (when not set: the cores divided by nproc, at least 1) plus `extraEnv` set;
/// waits for all of them. When one fails, the others are sent SIGTERM.
/// Returns 0 when all exit 0, else the first failing rank's exit code (128 + signal if killed).
int launchLocalWorkers(int nproc, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& extraEnv = {});

}  // namespace linac::distributed
