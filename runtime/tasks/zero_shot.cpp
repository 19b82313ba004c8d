#include "tasks/zero_shot.h"

#include "tasks/progress.h"
#include "tasks/ruler.h"
#include "tasks/scoring.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>

namespace linac::tasks {
namespace {

using Json = nlohmann::json;

const char* kindName(ZeroShotKind kind) {
  switch (kind) {
    case ZeroShotKind::MultipleChoice: return "multiple choice (\"choices\")";
    case ZeroShotKind::PartialContext: return "partial context (\"contexts\")";
    case ZeroShotKind::LastWord: return "last word (\"target\")";
  }
  return "";
}

std::string stringField(const Json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_string()) throw std::invalid_argument(std::string("needs a string \"") + name + "\"");
  return j[name].get<std::string>();
}

std::vector<std::string> stringList(const Json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_array() || j[name].size() < 2)
    throw std::invalid_argument(std::string("needs \"") + name + "\": a list of at least 2 strings");
  std::vector<std::string> out;
  for (const Json& s : j[name]) {
    if (!s.is_string()) throw std::invalid_argument(std::string("\"") + name + "\" holds a non-string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

int64_t goldField(const Json& j, size_t options) {
  if (!j.contains("gold") || !j["gold"].is_number_integer()) throw std::invalid_argument("needs an integer \"gold\"");
  const int64_t gold = j["gold"].get<int64_t>();
  if (gold < 0 || gold >= int64_t(options))
    throw std::invalid_argument("\"gold\" " + std::to_string(gold) + " is not an index of its " +
                                std::to_string(options) + " options");
  return gold;
}

std::pair<ZeroShotKind, ZeroShotDoc> parseDoc(const Json& j) {
  if (!j.is_object()) throw std::invalid_argument("is not a JSON object");
  ZeroShotDoc d;
  if (j.contains("target_delimiter")) {
    if (!j["target_delimiter"].is_string()) throw std::invalid_argument("\"target_delimiter\" is not a string");
    d.delimiter = j["target_delimiter"].get<std::string>();
  }
  if (j.contains("choices")) {
    d.contexts = {stringField(j, "context")};
    d.continuations = stringList(j, "choices");
    d.gold = goldField(j, d.continuations.size());
    return {ZeroShotKind::MultipleChoice, d};
  }
  if (j.contains("contexts")) {
    d.contexts = stringList(j, "contexts");
    d.continuations = {stringField(j, "continuation")};
    d.gold = goldField(j, d.contexts.size());
    return {ZeroShotKind::PartialContext, d};
  }
  if (j.contains("target")) {
    d.contexts = {stringField(j, "context")};
    d.continuations = {stringField(j, "target")};
    return {ZeroShotKind::LastWord, d};
  }
  throw std::invalid_argument("has none of \"choices\", \"contexts\" or \"target\"");
}

}  // namespace

ZeroShotTask loadZeroShotTask(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) throw data::DataError("cannot read task file " + path);
  ZeroShotTask task;
  task.name = name;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw data::DataError(where + "not valid JSON");
    try {
      auto [kind, doc] = parseDoc(j);
      if (task.docs.empty()) task.kind = kind;
      else if (kind != task.kind)
        throw std::invalid_argument(std::string("is a ") + kindName(kind) + " line in a " + kindName(task.kind) + " file");
      task.docs.push_back(std::move(doc));
    } catch (const std::invalid_argument& e) {
      throw data::DataError(where + "the line " + e.what());
    }
  }
  if (task.docs.empty()) throw data::DataError(path + ": no documents");
  return task;
}

ContinuationRequest encodePair(const data::Tokenizer& tokenizer, const std::string& context,
                               const std::string& continuation) {
  std::string ctx = context, cont = continuation;
  const size_t keep = ctx.find_last_not_of(" \t\n\r\v\f");
  const size_t trailing = keep == std::string::npos ? ctx.size() : ctx.size() - keep - 1;
  cont = ctx.substr(ctx.size() - trailing) + cont;
  ctx.resize(ctx.size() - trailing);
  const TokenIds whole = tokenizer.encode(ctx + cont);
  const TokenIds ctxIds = tokenizer.encode(ctx);
  ContinuationRequest r;
  r.context = {tokenizer.documentSeparator()};
  r.context.insert(r.context.end(), ctxIds.begin(), ctxIds.end());
  if (whole.size() > ctxIds.size()) r.continuation.assign(whole.begin() + int64_t(ctxIds.size()), whole.end());
  if (r.continuation.empty()) throw std::invalid_argument("the continuation '" + continuation + "' encodes to no tokens");
  return r;
}

ZeroShotResult runZeroShot(LanguageModel& model, const data::Tokenizer& tokenizer, const ZeroShotTask& task,
                           const ZeroShotOptions& options) {
  if (options.batch < 1) throw std::invalid_argument("runZeroShot: batch must be >= 1");
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = options.limit > 0 ? std::min<int64_t>(options.limit, int64_t(task.docs.size()))
                                      : int64_t(task.docs.size());
  Progress progress("documents", n, options.progress, options.progressEverySeconds);
  ZeroShotResult r;
  r.task = task.name;
  r.kind = task.kind;
  double correct = 0, correctNorm = 0, logLikelihood = 0;
  for (int64_t first = 0; first < n; first += options.batch) {
    const int64_t count = std::min(options.batch, n - first);
    std::vector<ContinuationRequest> requests;
    for (int64_t i = first; i < first + count; ++i) {
      const ZeroShotDoc& d = task.docs[size_t(i)];
      for (const std::string& c : d.contexts)
        for (const std::string& cont : d.continuations) requests.push_back(encodePair(tokenizer, c, d.delimiter + cont));
    }
    const std::vector<ContinuationScore> scores = model.score(requests);
    size_t next = 0;
    for (int64_t i = first; i < first + count; ++i) {
      const ZeroShotDoc& d = task.docs[size_t(i)];
      const size_t perDoc = d.contexts.size() * d.continuations.size();
      std::vector<double> lls;
      for (size_t k = 0; k < perDoc; ++k) lls.push_back(scores[next + k].total());
      if (task.kind == ZeroShotKind::LastWord) {
        correct += scores[next].allGreedy();
        logLikelihood += lls[0];
      } else if (task.kind == ZeroShotKind::MultipleChoice) {
        const ChoicePrediction p = predictChoice(lls, d.continuations);
        correct += p.acc == d.gold;
        correctNorm += p.accNorm == d.gold;
      } else {
        correct += argmaxFirst(lls) == d.gold;
      }
      next += perDoc;
    }
    progress.advance(count, task.name);
  }
  r.examples = n;
  r.acc = n ? correct / double(n) : 0.0;
  if (task.kind == ZeroShotKind::MultipleChoice) r.accNorm = n ? correctNorm / double(n) : 0.0;
  if (task.kind == ZeroShotKind::LastWord) r.perplexity = std::exp(-logLikelihood / double(std::max<int64_t>(n, 1)));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace linac::tasks
