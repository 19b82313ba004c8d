// c10d process group from the environment, broadcast, sharded data, local launch.
#include "distributed/distributed.h"
#include "kernels/cpu/thread_pool.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern "C" char** environ;

namespace linac::distributed {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    return std::nullopt;
  return std::string(v);
}

int envInt(const char* name, std::optional<int> fallback) {
  auto v = env(name);
  if (!v) {
    if (fallback)
      return *fallback;
    throw std::runtime_error(std::string("distributed: environment variable ") + name + " is not set");
  }
  try {
    size_t used = 0;
    int value = std::stoi(*v, &used);
    if (used != v->size())
      throw std::invalid_argument(*v);
    return value;
  } catch (const std::exception&) {
    throw std::runtime_error(std::string("distributed: ") + name + "=" + *v + " is not an integer");
  }
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait())
    throw std::runtime_error("distributed: a collective failed");
}

}  // namespace

bool launchedDistributed() { return env("WORLD_SIZE").has_value(); }

DistContext initFromEnvironment(const torch::Device& device) {
  DistContext ctx;
  ctx.worldSize = envInt("WORLD_SIZE", std::nullopt);
  ctx.rank = envInt("RANK", std::nullopt);
  ctx.localRank = envInt("LOCAL_RANK", ctx.rank);
  if (ctx.worldSize < 1 || ctx.rank < 0 || ctx.rank >= ctx.worldSize)
    throw std::runtime_error("distributed: need 0 <= RANK < WORLD_SIZE, got RANK=" + std::to_string(ctx.rank) +
                             " WORLD_SIZE=" + std::to_string(ctx.worldSize));
  const std::string addr = env("MASTER_ADDR").value_or("127.0.0.1");
  const int port = envInt("MASTER_PORT", std::nullopt);
  if (port <= 0 || port > 65535)
    throw std::runtime_error("distributed: MASTER_PORT=" + std::to_string(port) + " is not a TCP port");
  const std::chrono::milliseconds timeout(int64_t(envInt("LINAC_DIST_TIMEOUT_S", 600)) * 1000);

  c10d::TCPStoreOptions storeOptions;
  storeOptions.port = static_cast<uint16_t>(port);
  storeOptions.isServer = ctx.rank == 0;
  storeOptions.numWorkers = static_cast<size_t>(ctx.worldSize);
  storeOptions.waitWorkers = true;
  storeOptions.timeout = timeout;
  ctx.store = c10::make_intrusive<c10d::TCPStore>(addr, storeOptions);

  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(ctx.localRank));
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    ctx.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(ctx.store, ctx.rank, ctx.worldSize, options);
#else
    throw std::runtime_error("distributed: training on CUDA needs NCCL, and this build has no CUDA support "
                             "(configure with LINAC_ENABLE_CUDA=ON)");
#endif
  } else {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // Loopback launches (the default, and `--nproc`) stay on lo; otherwise the host's interface.
    if (addr == "127.0.0.1" || addr == "localhost")
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    ctx.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(ctx.store, ctx.rank, ctx.worldSize, options);
  }
  return ctx;
}

void broadcastParameters(torch::nn::Module& module, const DistContext& ctx) {
  if (ctx.worldSize == 1)
    return;
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const auto& b : module.buffers())
    tensors.push_back(b);
  for (auto& t : tensors) {
    // Broadcast into a contiguous tensor of the same data, then copy back (views stay valid).
    std::vector<at::Tensor> one{t.detach().contiguous()};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    wait(ctx.pg->broadcast(one, options));
    if (one[0].data_ptr() != t.data_ptr())
      t.detach().copy_(one[0]);
  }
}

void allReduceMean(torch::Tensor& tensor, const DistContext& ctx) {
  if (ctx.worldSize == 1)
    return;
  torch::NoGradGuard noGrad;
  std::vector<at::Tensor> one{tensor.detach().contiguous()};
  wait(ctx.pg->allreduce(one));
  one[0].div_(static_cast<double>(ctx.worldSize));
  if (one[0].data_ptr() != tensor.data_ptr())
    tensor.detach().copy_(one[0]);
}

void barrier(const DistContext& ctx) {
  if (ctx.worldSize > 1)
    wait(ctx.pg->barrier());
}

ShardedStream::ShardedStream(data::TokenStream& inner, int rank, int worldSize)
    : inner_(inner), rank_(rank), worldSize_(worldSize) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize)
    throw std::invalid_argument("ShardedStream: need 0 <= rank < worldSize");
}

torch::Tensor ShardedStream::next(int64_t batch) {
  torch::Tensor global = inner_.next(batch * worldSize_);
  return global.slice(0, rank_ * batch, (rank_ + 1) * batch).contiguous();
}

int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error(std::string("freeLoopbackPort: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(std::string("freeLoopbackPort: ") + std::strerror(e));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int launchLocalWorkers(int nproc, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& extraEnv) {
  if (nproc < 1)
    throw std::invalid_argument("launchLocalWorkers: nproc must be >= 1");
  if (args.empty())
    throw std::invalid_argument("launchLocalWorkers: args must hold argv[0]");
  const std::string port = std::to_string(freeLoopbackPort());
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Each rank's environment is built before fork(): the caller may have threads (LibTorch's
  // pools), so the child only calls execve, which is async-signal-safe.
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(nproc));
  std::vector<std::vector<char*>> envps(static_cast<size_t>(nproc));
  for (int rank = 0; rank < nproc; ++rank) {
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string::npos)
        vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    vars["RANK"] = vars["LOCAL_RANK"] = std::to_string(rank);
    vars["WORLD_SIZE"] = vars["LOCAL_WORLD_SIZE"] = std::to_string(nproc);
    vars["MASTER_ADDR"] = "127.0.0.1";
    vars["MASTER_PORT"] = port;
    // The ranks share this machine's cores: unless told otherwise, each rank's thread pools
    // (LibTorch's and the CPU kernels') get an equal share, as torchrun's OMP_NUM_THREADS does.
    if (!vars.count("OMP_NUM_THREADS"))
      vars["OMP_NUM_THREADS"] = std::to_string(std::max<int64_t>(1, kernels::cpu::hardwareThreadCount() / nproc));
    for (const auto& [k, v] : extraEnv)
      vars[k] = v;
    auto& strings = envs[size_t(rank)];
    for (const auto& [k, v] : vars)
      strings.push_back(k + "=" + v);
    for (auto& kv : strings)
      envps[size_t(rank)].push_back(kv.data());
    envps[size_t(rank)].push_back(nullptr);
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids)
        ::kill(p, SIGTERM);
      throw std::runtime_error(std::string("launchLocalWorkers: fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::execve("/proc/self/exe", argv.data(), envps[size_t(rank)].data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  // Ctrl-C reaches the ranks (same process group): they agree on a step, checkpoint and exit.
  // The launcher ignores it while waiting, so it still collects their exit codes.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  const bool ignoring = ::sigaction(SIGINT, &ignore, &previous) == 0;
  int firstFailure = 0;
  size_t alive = pids.size();
  while (alive > 0) {
    int status = 0;
    pid_t done = ::waitpid(-1, &status, 0);
    if (done < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    bool ours = false;
    for (auto& p : pids)
      if (p == done) {
        p = -1;
        ours = true;
      }
    if (!ours)
      continue;
    --alive;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && firstFailure == 0) {
      firstFailure = code;
      for (pid_t p : pids)  // the others would wait for the failed rank until the timeout
        if (p > 0)
          ::kill(p, SIGTERM);
    }
  }
  if (ignoring)
    ::sigaction(SIGINT, &previous, nullptr);
  return firstFailure;
}

}  // namespace linac::distributed
