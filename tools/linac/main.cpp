// `linac`: the command researchers run. Each subcommand lives in its own file; which ones exist
// depends on the build (the compiler needs MLIR, verify/train need the runtime).
#include "Args.h"
#include "Commands.h"
#include "Version.h"

#include "linac/Spec/Diagnostic.h"

#include <cstring>
#include <iostream>

namespace {

void printUsage(std::ostream& os) {
  os << "usage: linac <command> [options]\n\n"
        "commands:\n"
        "  compile SPEC [--emit=spec|ir|ir-opt|cpp] [--schedule S] [--preset P] [--out DIR]\n"
        "                       compile a spec; print a stage or write generated/<variant>/\n"
        "  compile --check      regenerate every spec and diff with generated/\n"
        "  emit SPEC... --out DIR [--backends cpu,cuda]\n"
        "                       a source package of the specs' kernels: a shared library with a C API\n"
        "                       and a CMake package (find_package(linac_kernels) -> linac::kernels)\n"
        "  verify SPEC [--backend cpu|cuda] [--shapes B,T,H,dk,dv[;...]] [--dtypes fp32,bf16]\n"
        "              [--seed N] [--chunk C]\n"
        "                       the spec's generated kernels against the float64 oracle\n"
        "  bench SPEC [--backend cuda|cpu] [--shape B,T,H,D] [--dtype bf16] [--iters N] [--json F]\n"
        "                       fwd, fwd+bwd and decode-step medians with the memory floor\n"
        "  train SPEC [--schedule 3:1] [--preset tiny|340m|1.3b] [--data PATH] [--steps N] [--out DIR]\n"
        "             [--resume] [--batch B] [--seq-len T] [--lr X] [--device cpu|cuda] [--nproc N]\n"
        "             [--no-overlap] [--task lm|mqar] [--mqar-pairs N] [--fused-loss on|off]\n"
        "             [--tokenizer byte|SPM.model] [--data-dtype uint16|uint32]\n"
        "                       build the hybrid model and train it (embedded corpus by default)\n"
        "  eval CHECKPOINT [--tasks ppl,mqar,ruler,arc_easy,...] [--data PATH] [--mqar-pairs 2,4,8]\n"
        "              [--context 1024,2048,4096] [--examples N] [--haystack FILE] [--task-dir DIR]\n"
        "              [--limit N] [--batch B]\n"
        "                       perplexity, MQAR recall, RULER and zero-shot tasks of a trained model\n"
        "  generate CHECKPOINT --prompt TEXT [--max-new N] [--temperature T] [--top-p P] [--seed S]\n"
        "              [--batch B] [--device cpu|cuda]\n"
        "                       continue a prompt through the state caches (prefill, then decode steps)\n"
        "  memory SPEC [--schedule 3:1] [--preset tiny] [--context L] [--batch B] [--dtype bf16] [--json]\n"
        "                       bytes of the inference caches per layer, beside the all-attention model's\n"
        "  sweep --specs A.yaml,B.yaml [--schedules 3:1,pure,transformer] [--preset P] [--steps N]\n"
        "        [--tasks ppl,mqar,...] [--seeds 1,2,3] [--out DIR] [--device cpu|cuda]\n"
        "        [--train-args \"...\"] [--eval-args \"...\"] [--plots on|off]\n"
        "                       train and evaluate the grid as one resumable folder; results table and plots\n"
        "  import FLA_DIR --out RUN_DIR [--spec S] [--tokenizer byte|none|SPM.model] [--seq-len T]\n"
        "                       an fla / Hugging Face checkpoint (config.json + safetensors) as a linac run\n"
        "  export RUN --out HF_DIR [--dtype fp32|bf16|fp16]\n"
        "                       a linac run as an fla checkpoint (config.json + model.safetensors)\n"
        "  version, --version   the version, the commit it was built from, the build's options\n"
        "  help                 this text\n";
  if (!linac::cli::compilerAvailable())
    os << "\n(this build has no compiler: configure with MLIR 22 for `compile`)\n";
  if (!linac::cli::runtimeAvailable())
    os << "\n(this build has no runtime: install LibTorch for `verify`)\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help")) {
    printUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::cout << linac::cli::versionText() << "\n";
    return 0;
  }
  std::string command = argv[1];
  try {
    if (command == "compile") return linac::cli::runCompile(argc, argv);
    if (command == "emit") return linac::cli::runEmit(argc, argv);
    if (command == "verify") return linac::cli::runVerify(argc, argv);
    if (command == "bench") return linac::cli::runBench(argc, argv);
    if (command == "train") return linac::cli::runTrain(argc, argv);
    if (command == "eval") return linac::cli::runEval(argc, argv);
    if (command == "generate") return linac::cli::runGenerate(argc, argv);
    if (command == "memory") return linac::cli::runMemory(argc, argv);
    if (command == "sweep") return linac::cli::runSweep(argc, argv);
    if (command == "import") return linac::cli::runImport(argc, argv);
    if (command == "export") return linac::cli::runExport(argc, argv);
    std::string hint = linac::spec::closestMatch(
        command, {"compile", "emit", "verify", "bench", "train", "eval", "generate", "memory", "sweep", "import", "export",
                  "version", "help"});
    throw linac::cli::UsageError("unknown command '" + command + "'" +
                                 (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  } catch (const linac::spec::SpecError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const linac::cli::UsageError& e) {
    std::cerr << "linac " << command << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "linac " << command << ": error: " << e.what() << "\n";
    return 1;
  }
}
