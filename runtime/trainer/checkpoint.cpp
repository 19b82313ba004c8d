#include "trainer/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <vector>

namespace fs = std::filesystem;

namespace linac::trainer::detail {
namespace {

// Flushes a file (or directory) to stable storage; without it a rename can reach the disk
// before the renamed file's contents, and a power loss leaves `latest` naming garbage.
void fsyncPath(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    throw TrainError("cannot open " + path.string() + " to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    throw TrainError("fsync " + path.string() + ": " + std::strerror(errno));
}

void renameOrThrow(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw TrainError("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

int64_t cudaGeneratorCount() {
  return torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
}

at::Generator cudaGenerator(int64_t index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
}

void writeRng(torch::serialize::OutputArchive& archive) {
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_cpu", gen.get_state());
  }
  int64_t count = cudaGeneratorCount();
  archive.write("rng_cuda_count", c10::IValue(count));
  for (int64_t i = 0; i < count; ++i) {
    auto gen = cudaGenerator(i);
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_cuda_" + std::to_string(i), gen.get_state());
  }
}

void readRng(torch::serialize::InputArchive& archive) {
  torch::Tensor state;
  archive.read("rng_cpu", state);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state.cpu());  // load_from(device) may have moved it; states live on the CPU
  }
  c10::IValue countValue;
  archive.read("rng_cuda_count", countValue);
  // A checkpoint from a GPU run resumed on a machine with fewer GPUs restores those it can.
  int64_t count = std::min(countValue.toInt(), cudaGeneratorCount());
  for (int64_t i = 0; i < count; ++i) {
    torch::Tensor cudaState;
    archive.read("rng_cuda_" + std::to_string(i), cudaState);
    auto gen = cudaGenerator(i);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cudaState.cpu());
  }
}

int64_t readInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

}  // namespace

std::string writeCheckpoint(const std::string& outDir, const CheckpointInfo& info,
                            const torch::nn::Module& module, const torch::optim::Optimizer& optimizer) {
  fs::path dir(outDir);
  fs::create_directories(dir);
  fs::path tmp = dir / "ckpt.tmp";
  fs::path final = dir / ("ckpt-" + std::to_string(info.step) + ".pt");

  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive modelArchive, optimizerArchive;
  module.save(modelArchive);
  optimizer.save(optimizerArchive);
  archive.write("model", modelArchive);
  archive.write("optimizer", optimizerArchive);
  archive.write("step", c10::IValue(info.step));
  archive.write("data_position", c10::IValue(info.dataPosition));
  archive.write("batch", c10::IValue(info.batch));
  archive.write("accumulation", c10::IValue(info.accumulation));
  archive.write("seq_len", c10::IValue(info.seqLen));
  archive.write("config", c10::IValue(info.configJson));
  writeRng(archive);
  try {
    archive.save_to(tmp.string());
  } catch (const std::exception& e) {
    throw TrainError("cannot write checkpoint " + tmp.string() + ": " + e.what(), info.step);
  }
  fsyncPath(tmp, false);
  renameOrThrow(tmp, final);

  fs::path latestTmp = dir / "latest.tmp";
  {
    std::ofstream out(latestTmp, std::ios::trunc);
    out << final.filename().string() << "\n";
    out.close();
    if (!out)
      throw TrainError("cannot write " + latestTmp.string(), info.step);
  }
  fsyncPath(latestTmp, false);
  renameOrThrow(latestTmp, dir / "latest");
  fsyncPath(dir, true);
  return final.string();
}

std::optional<std::string> latestCheckpoint(const std::string& outDir) {
  fs::path latest = fs::path(outDir) / "latest";
  std::ifstream in(latest);
  if (!in)
    return std::nullopt;
  std::string name;
  std::getline(in, name);
  if (name.empty())
    throw TrainError(latest.string() + " is empty");
  return (fs::path(outDir) / name).string();
}

CheckpointInfo readCheckpoint(const std::string& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, const torch::Device& device) {
  CheckpointInfo info;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    torch::serialize::InputArchive modelArchive, optimizerArchive;
    archive.read("model", modelArchive);
    archive.read("optimizer", optimizerArchive);
    module.load(modelArchive);
    optimizer.load(optimizerArchive);
    info.step = readInt(archive, "step");
    info.dataPosition = readInt(archive, "data_position");
    info.batch = readInt(archive, "batch");
    info.accumulation = readInt(archive, "accumulation");
    info.seqLen = readInt(archive, "seq_len");
    c10::IValue config;
    archive.read("config", config);
    info.configJson = config.toStringRef();
    readRng(archive);
  } catch (const TrainError&) {
    throw;
  } catch (const std::exception& e) {
    throw TrainError("cannot load checkpoint " + path + ": " + e.what());
  }
  return info;
}

}  // namespace linac::trainer::detail

namespace linac::trainer {

int64_t loadModelWeights(const std::string& path, torch::nn::Module& module, const torch::Device& device) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    torch::serialize::InputArchive modelArchive;
    archive.read("model", modelArchive);
    module.load(modelArchive);
    return detail::readInt(archive, "step");
  } catch (const TrainError&) {
    throw;
  } catch (const std::exception& e) {
    throw TrainError("cannot load model weights from checkpoint " + path + ": " + e.what());
  }
}

}  // namespace linac::trainer

namespace linac::trainer::detail {

void pruneCheckpoints(const std::string& outDir, int64_t keep) {
  if (keep <= 0)
    return;
  static const std::regex pattern(R"(ckpt-(\d+)\.pt)");
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(outDir)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern))
      found.emplace_back(std::stoll(m[1].str()), entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep); i < found.size(); ++i) {
    std::error_code ec;  // a checkpoint that cannot be deleted costs disk, not correctness
    fs::remove(found[i].second, ec);
  }
}

}  // namespace linac::trainer::detail
