#include "tasks/ruler_run.h"

#include "tasks/progress.h"
#include "tasks/scoring.h"

#include <chrono>

namespace linac::tasks {

std::vector<RulerScore> runRuler(LanguageModel& model, const RulerSetup& setup, const RulerOptions& options) {
  if (!setup.tokenizer) throw std::invalid_argument("runRuler: no tokenizer");
  if (options.examples < 1) throw std::invalid_argument("runRuler: examples must be >= 1");
  if (options.batch < 1) throw std::invalid_argument("runRuler: batch must be >= 1");
  std::vector<std::string> tasks = options.tasks;
  if (tasks.empty())
    for (const RulerTaskInfo& t : rulerTasks()) tasks.push_back(t.name);
  for (const std::string& t : tasks) rulerTask(t);  // validates before any work

  const int64_t total = int64_t(tasks.size() * options.contexts.size()) * options.examples;
  Progress progress("examples", total, options.progress, options.progressEverySeconds);
  std::vector<RulerScore> scores;
  for (int64_t context : options.contexts) {
    for (const std::string& name : tasks) {
      const RulerTaskInfo& info = rulerTask(name);
      const auto start = std::chrono::steady_clock::now();
      RulerScore s;
      s.task = name;
      s.context = context;
      double sum = 0;
      try {
        for (int64_t first = 0; first < options.examples; first += options.batch) {
          const int64_t count = std::min(options.batch, options.examples - first);
          std::vector<RulerExample> examples;
          std::vector<TokenIds> prompts;
          for (int64_t i = first; i < first + count; ++i) {
            examples.push_back(makeRulerExample(name, setup, context, options.seed, i));
            prompts.push_back(promptIds(*setup.tokenizer, examples.back().prompt));
          }
          const std::vector<TokenIds> outputs =
              model.generate(prompts, info.maxNew, setup.tokenizer->documentSeparator());
          for (size_t j = 0; j < examples.size(); ++j) {
            const std::string prediction = rulerPostprocess(setup.tokenizer->decode(outputs[j]));
            sum += info.metric == RulerMetric::MatchAll ? stringMatchAll(prediction, examples[j].answers)
                                                        : stringMatchPart(prediction, examples[j].answers);
          }
          s.examples += count;
          progress.advance(count, "ruler " + std::to_string(context) + " " + name);
        }
      } catch (const RulerDoesNotFit& e) {
        s.neededTokens = e.neededTokens();
        progress.advance(options.examples - s.examples, "ruler " + std::to_string(context) + " " + name + " (does not fit)");
        s.examples = 0;
      }
      constexpr double kPercent = 100.0;
      s.score = s.examples ? kPercent * sum / double(s.examples) : 0.0;
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      scores.push_back(s);
    }
  }
  return scores;
}

std::pair<double, int64_t> rulerAverage(const std::vector<RulerScore>& scores, int64_t context) {
  double sum = 0;
  int64_t n = 0;
  for (const RulerScore& s : scores)
    if (s.context == context && s.fits()) sum += s.score, ++n;
  return {n ? sum / double(n) : 0.0, n};
}

}  // namespace linac::tasks
