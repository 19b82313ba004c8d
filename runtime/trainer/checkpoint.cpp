#include "trainer/checkpoint.h"

#include "trainer/crc32c.h"
#include "trainer/file_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <ostream>
#include <set>
#include <vector>

namespace linac::trainer::detail {
namespace {

constexpr int kManifestFormat = 1;

struct Manifest {
  CheckpointInfo info;
  std::string file;  // the payload's name, "ckpt-<step>.pt"
  uint64_t bytes = 0;
  std::string crc32c;
};

std::string baseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string manifestPath(const std::string& checkpointPath) {
  std::string p = checkpointPath;
  if (p.size() > 3 && p.compare(p.size() - 3, 3, ".pt") == 0)
    p.resize(p.size() - 3);
  return p + ".json";
}

Manifest parseManifest(const std::string& path) {
  std::optional<std::string> text = readFileIfExists(path);
  if (!text)
    throw TrainError("has no manifest " + baseName(path) +
                     " (its write was interrupted, or a linac without checkpoint checksums wrote it)");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    throw TrainError("its manifest " + baseName(path) + " is not a JSON object (damaged)");
  Manifest m;
  try {
    if (j.at("format").get<int>() != kManifestFormat)
      throw TrainError("its manifest " + baseName(path) + " has format " + j.at("format").dump() +
                       ", this linac reads format " + std::to_string(kManifestFormat));
    m.file = j.at("checkpoint").get<std::string>();
    m.bytes = j.at("bytes").get<uint64_t>();
    m.crc32c = j.at("crc32c").get<std::string>();
    m.info.step = j.at("step").get<int64_t>();
    m.info.dataPosition = j.at("data_position").get<int64_t>();
    m.info.batch = j.at("batch").get<int64_t>();
    m.info.accumulation = j.at("accumulation").get<int64_t>();
    m.info.seqLen = j.at("seq_len").get<int64_t>();
    m.info.configJson = j.at("config").dump();
  } catch (const nlohmann::json::exception& e) {
    throw TrainError("its manifest " + baseName(path) + " is incomplete (" + e.what() + ")");
  }
  return m;
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

std::optional<int64_t> checkpointStep(const std::string& name) {
  const std::string prefix = "ckpt-";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])))
    ++end;
  const std::string suffix = name.substr(end);
  if (end == prefix.size() || end - prefix.size() > 18 || (suffix != ".pt" && suffix != ".json"))
    return std::nullopt;
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

std::string writeCheckpoint(const std::string& outDir, const CheckpointInfo& info,
                            const torch::nn::Module& module, const torch::optim::Optimizer& optimizer) {
  makeDirectories(outDir);
  const std::string name = "ckpt-" + std::to_string(info.step) + ".pt";
  const std::string path = outDir + "/" + name;

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

  // The payload streams into ckpt-<step>.pt.tmp through a checked write() while its CRC is
  // computed. After a failed write (a full disk) the rest is dropped but reported as written:
  // a short count makes LibTorch's archive writer throw "unexpected pos" from its destructor,
  // which terminates the process. The failure is reported once the archive is done.
  AtomicFile payload(path);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  try {
    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (payload.tryWrite(data, size)) {
        crc = crc32c(crc, data, size);
        bytes += size;
      }
      return size;
    });
  } catch (const std::exception& e) {
    if (payload.error() != 0)
      payload.fail(payload.error());
    throw TrainError("cannot write checkpoint " + payload.tmpPath() + ": " + e.what());
  }
  if (payload.error() != 0)
    payload.fail(payload.error());

  nlohmann::ordered_json manifest;
  manifest["format"] = kManifestFormat;
  manifest["checkpoint"] = name;
  manifest["bytes"] = bytes;
  manifest["crc32c"] = crc32cHex(crc);
  manifest["step"] = info.step;
  manifest["data_position"] = info.dataPosition;
  manifest["batch"] = info.batch;
  manifest["accumulation"] = info.accumulation;
  manifest["seq_len"] = info.seqLen;
  manifest["config"] = nlohmann::ordered_json::parse(info.configJson);
  writeFileAtomically(manifestPath(path), manifest.dump(2) + "\n");
  payload.commit();
  writeFileAtomically(outDir + "/latest", name + "\n");
  return path;
}

CheckpointInfo readManifest(const std::string& checkpointPath) {
  try {
    return parseManifest(manifestPath(checkpointPath)).info;
  } catch (const TrainError& e) {
    throw TrainError(checkpointPath + " " + e.what());
  }
}

CheckpointInfo verifyCheckpoint(const std::string& checkpointPath) {
  Manifest m;
  try {
    m = parseManifest(manifestPath(checkpointPath));
  } catch (const TrainError& e) {
    throw TrainError(checkpointPath + " " + e.what());
  }
  if (m.file != baseName(checkpointPath))
    throw TrainError(checkpointPath + ": its manifest describes " + m.file);
  int fd = ::open(checkpointPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw TrainError(checkpointPath + ": " + std::strerror(errno));
  std::vector<char> buf(size_t(1) << 20);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw TrainError(checkpointPath + ": " + std::strerror(err));
    }
    if (n == 0)
      break;
    crc = crc32c(crc, buf.data(), size_t(n));
    bytes += uint64_t(n);
  }
  ::close(fd);
  if (bytes != m.bytes)
    throw TrainError(checkpointPath + " is damaged: it is " + std::to_string(bytes) + " bytes, its manifest says " +
                     std::to_string(m.bytes) + " (truncated or overwritten)");
  if (crc32cHex(crc) != m.crc32c)
    throw TrainError(checkpointPath + " is damaged: checksum mismatch (CRC-32C " + crc32cHex(crc) +
                     ", its manifest says " + m.crc32c + ")");
  return m.info;
}

std::optional<std::string> latestCheckpoint(const std::string& outDir) {
  std::optional<std::string> text = readFileIfExists(outDir + "/latest");
  if (!text)
    return std::nullopt;
  std::string name = text->substr(0, text->find('\n'));
  if (name.empty())
    throw TrainError(outDir + "/latest is empty");
  return outDir + "/" + name;
}

std::optional<IntactCheckpoint> findIntactCheckpoint(const std::string& outDir, std::ostream* notices) {
  std::vector<int64_t> steps;
  for (const auto& name : listDirectory(outDir))
    if (auto step = checkpointStep(name))
      steps.push_back(*step);
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  if (steps.empty())
    return std::nullopt;
  // Checkpoints after the one `latest` names are leftovers of a run that resumed from an
  // earlier one (found damaged): they are not candidates.
  if (auto latest = latestCheckpoint(outDir)) {
    if (auto from = checkpointStep(baseName(*latest)); from && *from >= steps.back())
      steps.erase(std::remove_if(steps.begin(), steps.end(), [&](int64_t s) { return s > *from; }), steps.end());
  }
  std::vector<std::string> problems;
  for (int64_t step : steps) {
    const std::string path = outDir + "/ckpt-" + std::to_string(step) + ".pt";
    try {
      CheckpointInfo info = verifyCheckpoint(path);
      if (!problems.empty() && notices)
        *notices << "warning: falling back to " << path << " (step " << step << "), the newest intact checkpoint"
                 << std::endl;
      return IntactCheckpoint{path, info};
    } catch (const TrainError& e) {
      problems.push_back(e.what());
      if (notices)
        *notices << "warning: " << e.what() << std::endl;
    }
  }
  std::string message = "no intact checkpoint in " + outDir + ":";
  for (const auto& p : problems)
    message += "\n  " + p;
  throw TrainError(message);
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

void pruneCheckpoints(const std::string& outDir, int64_t keep, int64_t currentStep) {
  std::vector<int64_t> steps;
  std::set<int64_t> payloads;
  for (const auto& name : listDirectory(outDir))
    if (auto step = checkpointStep(name)) {
      steps.push_back(*step);
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0)
        payloads.insert(*step);
    }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  int64_t kept = 0;
  for (int64_t step : steps) {
    // A manifest without its payload (a write cut short) is not a checkpoint to keep.
    if (payloads.count(step) && step <= currentStep && (keep <= 0 || kept++ < keep))
      continue;
    const std::string stem = outDir + "/ckpt-" + std::to_string(step);
    ::unlink((stem + ".pt").c_str());  // a checkpoint that cannot be deleted costs disk, not correctness
    ::unlink((stem + ".json").c_str());
  }
}

}  // namespace linac::trainer::detail

namespace linac::trainer {

int64_t loadModelWeights(const std::string& path, torch::nn::Module& module, const torch::Device& device) {
  const detail::CheckpointInfo info = detail::verifyCheckpoint(path);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    torch::serialize::InputArchive modelArchive;
    archive.read("model", modelArchive);
    module.load(modelArchive);
    return info.step;
  } catch (const std::exception& e) {
    throw TrainError("cannot load model weights from checkpoint " + path + ": " + e.what());
  }
}

std::string writeModelCheckpoint(const std::string& outDir, const TrainConfig& config, int64_t step,
                                 torch::nn::Module& module) {
  torch::optim::AdamW optimizer(module.parameters());
  detail::CheckpointInfo info;
  info.step = step;
  info.batch = config.batch;
  info.accumulation = config.accumulation;
  info.seqLen = config.seqLen;
  info.configJson = configToJson(config);
  return detail::writeCheckpoint(outDir, info, module, optimizer);
}

std::string latestIntactCheckpoint(const std::string& runDir, std::ostream* notices) {
  if (!detail::isDirectory(runDir))
    throw TrainError(runDir + " is not a directory");
  auto found = detail::findIntactCheckpoint(runDir, notices);
  if (!found)
    throw TrainError(runDir + " holds no checkpoint");
  return found->path;
}

}  // namespace linac::trainer
