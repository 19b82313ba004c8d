// Memory-mapped token shards (token_shards.h): headers checked against the files' sizes, ids
// decoded from little-endian bytes window by window, document starts searched in the mapped
// indexes.
#include "data/token_shards.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef LINAC_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

#include "data/files.h"

namespace linac::data {
namespace {

constexpr int kIndexEntryBytes = 8;  // NAME.idx: one little-endian uint64 per document
constexpr size_t kShownHashChars = 12;

/// A read-only private mapping of a whole file (none for an empty file), unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw DataError(path + ": cannot open for reading: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      throw DataError(path + ": " + std::strerror(e));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        throw DataError(path + ": cannot map into memory: " + std::strerror(e));
      }
      data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);  // the mapping keeps the file
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Little-endian, byte by byte, so the host's byte order does not matter.
uint64_t readLittleEndian(const unsigned char* p, int width) {
  uint64_t v = 0;
  for (int b = width - 1; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

int dtypeWidth(const std::string& dtype) { return dtype == "uint16" ? 2 : 4; }

std::string stem(const std::string& binPath) { return binPath.substr(0, binPath.size() - std::string(".bin").size()); }

}  // namespace

struct TokenShards::Shard {
  std::string path;
  std::unique_ptr<MappedFile> ids;
  std::unique_ptr<MappedFile> index;
  int width = 2;
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t offset = 0;  // the first token's position in the joined set

  int64_t documentStart(int64_t d) const {  // local position of document d's first token
    return int64_t(readLittleEndian(index->data() + d * kIndexEntryBytes, kIndexEntryBytes));
  }
};

bool isTokenShardPath(const std::string& path) {
  std::vector<std::string> files;
  try {
    files = detail::corpusFiles(path);
  } catch (const DataError&) {
    return false;
  }
  return std::any_of(files.begin(), files.end(), [](const std::string& f) {
    return detail::lowerExtension(f) == ".bin" && detail::isRegularFile(stem(f) + ".json");
  });
}

TokenShards::~TokenShards() = default;

std::shared_ptr<const TokenShards> TokenShards::open(const std::string& path, const std::string& dtype) {
#ifdef LINAC_HAVE_NLOHMANN_JSON
  if (!dtype.empty() && dtype != "uint16" && dtype != "uint32")
    throw DataError("token shards: dtype must be uint16 or uint32, got \"" + dtype + "\"");
  std::shared_ptr<TokenShards> set(new TokenShards());
  for (const std::string& bin : detail::corpusFiles(path)) {
    const std::string headerPath = stem(bin) + ".json";
    if (detail::lowerExtension(bin) != ".bin" || !detail::isRegularFile(headerPath))
      throw DataError(bin + ": not a token shard (a .bin with a .json header beside it), in " + path +
                      ", which holds token shards; keep text and shards in separate directories");
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(detail::readWholeFile(headerPath));
      if (h.value("format", "") != kTokenShardFormat)
        throw DataError(headerPath + ": \"format\" is not \"" + kTokenShardFormat + "\"");
      auto shard = std::make_unique<Shard>();
      shard->path = bin;
      const std::string shardDtype = h.at("dtype").get<std::string>();
      if (shardDtype != "uint16" && shardDtype != "uint32")
        throw DataError(headerPath + ": dtype \"" + shardDtype + "\" is not uint16 or uint32");
      const std::string expected = !dtype.empty() ? dtype : set->dtype_;
      if (!expected.empty() && shardDtype != expected)
        throw DataError(headerPath + ": the shard holds " + shardDtype + " ids, " +
                        (dtype.empty() ? "the shards before it " + expected
                                       : expected + " was asked for (leave the dtype out to take the header's)"));
      const int64_t vocab = h.at("vocab_size").get<int64_t>();
      if (vocab < 1) throw DataError(headerPath + ": vocab_size must be >= 1");
      if (set->vocabSize_ != 0 && vocab != set->vocabSize_)
        throw DataError(headerPath + ": vocab_size " + std::to_string(vocab) + " differs from the shards before it (" +
                        std::to_string(set->vocabSize_) + "): shards of one set come from one tokenizer");
      std::optional<int64_t> separator;
      if (h.contains("document_separator") && !h["document_separator"].is_null())
        separator = h["document_separator"].get<int64_t>();
      if (!set->shards_.empty() && separator != set->separator_)
        throw DataError(headerPath + ": its document_separator differs from the shards before it: shards of one "
                        "set come from one tokenizer");
      set->separator_ = separator;
      shard->width = dtypeWidth(shardDtype);
      shard->tokens = h.at("tokens").get<int64_t>();
      shard->documents = h.at("documents").get<int64_t>();
      shard->ids = std::make_unique<MappedFile>(bin);
      if (shard->tokens < 0 || shard->ids->size() != size_t(shard->tokens) * shard->width)
        throw DataError(bin + ": " + std::to_string(shard->ids->size()) + " bytes, but its header says " +
                        std::to_string(shard->tokens) + " " + shardDtype + " tokens (a truncated or replaced shard?)");
      shard->index = std::make_unique<MappedFile>(stem(bin) + ".idx");
      if (shard->documents < 0 || shard->index->size() != size_t(shard->documents) * kIndexEntryBytes)
        throw DataError(stem(bin) + ".idx: " + std::to_string(shard->index->size()) + " bytes, but " + headerPath +
                        " says " + std::to_string(shard->documents) + " documents (8 bytes each)");
      if (set->tokenizer_.empty() && h.contains("tokenizer") && h["tokenizer"].is_object()) {
        const auto& t = h["tokenizer"];
        set->tokenizer_ = t.value("kind", "?") + " " + t.value("path", "?");
        set->tokenizerSha256_ = t.value("sha256", "");
        if (!set->tokenizerSha256_.empty())
          set->tokenizer_ += " (sha256 " + set->tokenizerSha256_.substr(0, kShownHashChars) + "...)";
      }
      set->dtype_ = shardDtype;
      set->vocabSize_ = vocab;
      shard->offset = set->tokens_;
      set->tokens_ += shard->tokens;
      set->documents_ += shard->documents;
      set->shards_.push_back(std::move(shard));
    } catch (const nlohmann::json::exception& e) {
      throw DataError(headerPath + ": not a token shard header (" + e.what() + ")");
    }
  }
  set->description_ = path + ": " + std::to_string(set->shards_.size()) +
                      (set->shards_.size() == 1 ? " shard, " : " shards, ") + set->dtype_ + ", vocab " +
                      std::to_string(set->vocabSize_) + ", " + std::to_string(set->documents_) + " documents, " +
                      std::to_string(set->tokens_) + " tokens" +
                      (set->tokenizer_.empty() ? std::string() : ", tokenizer " + set->tokenizer_);
  return set;
#else
  (void)dtype;
  throw DataError(path + ": this build cannot read token shard headers (nlohmann_json was not found when linac "
                         "was configured)");
#endif
}

void TokenShards::read(int64_t start, int64_t count, int64_t* dst) const {
  if (start < 0 || count < 0 || start + count > tokens_)
    throw std::out_of_range("token shards: ids [" + std::to_string(start) + ", " + std::to_string(start + count) +
                            ") outside [0, " + std::to_string(tokens_) + ")");
  // The shard holding `start`: the last one whose offset is <= start.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), start,
                             [](int64_t pos, const std::unique_ptr<Shard>& s) { return pos < s->offset; });
  for (--it; count > 0; ++it) {
    const Shard& s = **it;
    const int64_t local = start - s.offset;
    const int64_t n = std::min(count, s.tokens - local);
    const unsigned char* p = s.ids->data() + local * s.width;
    for (int64_t i = 0; i < n; ++i) {
      const auto id = int64_t(readLittleEndian(p + i * s.width, s.width));
      if (id >= vocabSize_)
        throw DataError(s.path + ": id " + std::to_string(id) + " at position " + std::to_string(local + i) +
                        " is outside the header's vocabulary (" + std::to_string(vocabSize_) + ")");
      dst[i] = id;
    }
    start += n, count -= n, dst += n;
  }
}

int64_t TokenShards::documentStartAtOrAfter(int64_t position) const {
  for (const auto& s : shards_) {
    if (s->offset + s->tokens <= position) continue;
    // The first document of this shard that starts at or after `position` (binary search).
    int64_t lo = 0, hi = s->documents;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (s->offset + s->documentStart(mid) < position) lo = mid + 1;
      else hi = mid;
    }
    if (lo < s->documents) return s->offset + s->documentStart(lo);
  }
  return tokens_;
}

std::vector<int64_t> TokenShards::documentStarts() const {
  std::vector<int64_t> starts;
  starts.reserve(size_t(documents_));
  for (const auto& s : shards_)
    for (int64_t d = 0; d < s->documents; ++d) starts.push_back(s->offset + s->documentStart(d));
  return starts;
}

int64_t shardHeldOutStart(const TokenShards& shards, int64_t minTrainTokens, double fraction, int64_t maxTokens) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw std::invalid_argument("held-out fraction must lie in [0, 1), got " + std::to_string(fraction));
  const int64_t total = shards.tokens();
  const int64_t wanted = std::min<int64_t>(std::llround(fraction * double(total)), maxTokens);
  const int64_t documentStart = wanted == 0 ? total : shards.documentStartAtOrAfter(total - wanted);
  const int64_t heldStart = documentStart < total ? documentStart : total - wanted;
  if (heldStart < minTrainTokens)
    throw DataError(shards.description() + ": too small: " + std::to_string(heldStart) +
                    " tokens are left for training after holding out " + std::to_string(total - heldStart) +
                    ", and training needs at least " + std::to_string(minTrainTokens));
  return heldStart;
}

std::unique_ptr<TokenStream> makeShardStream(std::shared_ptr<const TokenShards> shards, int64_t end, int64_t seqLen,
                                             uint64_t seed, int rank, int worldSize) {
  if (end < 0 || end > shards->tokens())
    throw std::invalid_argument("shard stream: end " + std::to_string(end) + " outside [0, " +
                                std::to_string(shards->tokens()) + "]");
  auto read = [shards](int64_t start, int64_t count, int64_t* dst) { shards->read(start, count, dst); };
  return makeWindowStream(std::move(read), end, seqLen, seed, rank, worldSize);
}

}  // namespace linac::data
