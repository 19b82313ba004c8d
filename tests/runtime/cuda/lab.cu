// linac_cuda_lab: the kernel lab for runtime/kernels/cuda (llm.c style). For each case it draws
// fresh random inputs with realistic gates, runs the CUDA kernel on NaN-poisoned outputs, and
// compares with a float64 token-by-token recurrence written in the lab from recurrence.h's comments.
// Prints a table (kind, dtype, shape, rel-RMS, PASS/FAIL), then forward timings at fla's anchor
// shape. Exit: 0 all pass, 1 a failure, 77 no GPU (ctest SKIP_RETURN_CODE).
// Backward checks: float64 reverse-mode sweep of the token recurrence (all gradients; a fixed
// decay's d_g, a sum over every token, against the larger of its norm and its per-token terms', as
// `linac verify` measures it); where the path is called deterministic (chunkBackwardAtomics), the
// same bits from a second run ("bits"); forward+backward timings.
// Forward timings run the default dispatch (the Hopper stages on an H200 where they apply) and,
// beside it, the mma.sync skeleton (LINAC_HOPPER=0).
// Files: lab.cu (this text and main: the flags, the device line, the pieces in order),
// lab_common.h / lab_common.cu (the random stream, encoding, inputs, the float64 token recurrence,
// report), lab_forward.cu and lab_backward.cu (the checks), lab_bench.cu (the autotuner's check,
// the timings), lab_cases.cu (the --quick and the full case lists).
// Usage: linac_cuda_lab [--quick | --fwd-only | --bench-only] [--no-bench] [--no-bwd] [--no-fwd] [--hopper-bwd]
//                       [--hopper-late] [--hopper-diag] [--hopper-column-inverse] [--hopper-wide]
//                       [--hopper-wide-bwd] [--hopper-diag-single] [--no-hopper-diag-wide]
//                       [--hopper-overlap] [--hopper-fused-reverse] [--hopper-auto]
//                       [--env NAME=VALUE] [--bench-rows TEXT] [--cases TEXT]
//                       [--seed N] [--dump-failing DIR] [--untimed]
//   --untimed     under compute-sanitizer: the autotune case checks its runs, not which kernel won
//   --hopper-bwd  forces the Hopper backward where it applies (LINAC_HOPPER_BWD=1, the default on
//                 an H200); the backward timings show it beside the mma.sync path either way
//   --hopper-late the forward cases run the late q / w loads of the delta rule's state stage for
//                 every decay (LINAC_HOPPER_LATE=1; the default times them per shape class)
//   --hopper-diag forces the Hopper stages of a diagonal decay (LINAC_HOPPER_DIAG=1, the default);
//   --hopper-column-inverse  the delta rule's cases take (I + A)^-1 one column per thread in both
//                 preparations (LINAC_HOPPER_BLOCK_INVERSE=0); the forward timings show it beside
//                 the default
//   --hopper-wide forces the Hopper stages for key dim 256 and value dims above 256
//                 (LINAC_HOPPER_WIDE=1, the default; the dk 256 cases, the fwd-only wide-head cases)
//   --hopper-wide-bwd  the delta rule's backward at dk 256, dv 512 takes the Hopper stages
//                 (LINAC_HOPPER_WIDE_BWD=1, the default; LINAC_HOPPER_WIDE_BWD=0 sends the
//                 dk 256 x dv 512 backward cases to the mma.sync kernels)
//   --hopper-diag-single  the diagonal decay's Hopper gradient stage takes Ks and Qs in one 16-bit
//                 half (LINAC_HOPPER_DIAG_BWD=single; the default takes two where the kind's
//                 preciseDecayGrad says so, as the -exp(w) cases and every exclusive readout's
//                 backward set it, see lab_backward.cu's asCompiled; LINAC_HOPPER_DIAG_BWD=0
//                 sends both readouts to the mma.sync passes)
//   --no-hopper-diag-wide  the diagonal decay's backward at dv above 128 on the mma.sync passes
//                 (LINAC_HOPPER_DIAG_WIDE=0) instead of the Hopper stages in value tiles of 128
//   --hopper-overlap  the delta rule's state stage in the overlapped order (LINAC_HOPPER_OVERLAP=1:
//                 W S and K^T X waited for alone, Q S and P X under them); the forward timings
//                 show it beside the default
//   --hopper-fused-reverse  the delta rule's backward stages 3 and 4 as one reverse pass with dS
//                 on chip (LINAC_HOPPER_FUSED_REVERSE=1; dk, dv <= 128); the backward timings
//                 show it beside the default (column 'alt')
//   --env NAME=VALUE  sets one of the kernels' environment switches for this process, e.g.
//                 --env LINAC_HOPPER_JOINT_STATE=0 to run the path a default replaced (the switches:
//                 runtime/kernels/cuda/hopper/hopper_forward.h, hopper_backward.h)
//   --hopper-auto the delta rule's late loads, overlapped order and fused reverse pass, and the
//                 additive rule's prepared scores, timed against their alternatives per shape
//                 class (=auto: kernels/cuda/autotune.h), each case running the winner: the
//                 default, named here to override the environment
//   --fwd-only    the chunk-forward cases (every kind, dtype and shape) and the forward timings
//   --bench-only  the timings alone (forward; backward too unless --no-bwd)
//   --no-fwd      no forward timing rows (the backward's alone, e.g. under ncu)
//   --bench-rows  only the timing rows whose name contains TEXT (e.g. "GDN"; "T16384,D256": any of
//                 several); the forward table's rows at its first shape (B8 T4096 H8 D128) unless a
//                 part names another shape's token (T16384, D64, D256): a short run for a profiler
//   --cases TEXT  only the forward / backward chunk cases whose line ("bwd additive-diag-bonus bf16
//                 B2 T300 H1 dk64 dv128 g>=-20") contains TEXT or one of its comma-separated parts
//                 (the other checks still run), e.g. one case under a sanitizer, in a loop
//   --seed N      the random stream's seed (printed on the device line of every run): replays a run
//   --dump-failing DIR  each backward case with a failing check writes its draw, the float64
//                 reference and the kernels' gradients to DIR/bwd-<n>.bin (lab_dump.h), for
//                 delta_bwd_host_check.py --replay
#include "autotune.h"
#include "lab_common.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

using namespace lab;

int main(int argc, char** argv) {
  // a line at a time into a pipe too, so a run cut short by a timeout keeps the rows it printed
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool quick = false, fwd_only = false, bench_only = false, do_bench = true, do_bwd = true, do_fwd = true;
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--fwd-only")) { fwd_only = true; do_bwd = false; }
    else if (!std::strcmp(argv[i], "--bench-only")) bench_only = true;
    else if (!std::strcmp(argv[i], "--hopper-bwd")) setenv("LINAC_HOPPER_BWD", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-late")) setenv("LINAC_HOPPER_LATE", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-diag")) setenv("LINAC_HOPPER_DIAG", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-column-inverse")) setenv("LINAC_HOPPER_BLOCK_INVERSE", "0", 1);
    else if (!std::strcmp(argv[i], "--hopper-wide")) setenv("LINAC_HOPPER_WIDE", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-wide-bwd")) setenv("LINAC_HOPPER_WIDE_BWD", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-diag-single")) setenv("LINAC_HOPPER_DIAG_BWD", "single", 1);
    else if (!std::strcmp(argv[i], "--no-hopper-diag-wide")) setenv("LINAC_HOPPER_DIAG_WIDE", "0", 1);
    else if (!std::strcmp(argv[i], "--hopper-overlap")) setenv("LINAC_HOPPER_OVERLAP", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-fused-reverse")) setenv("LINAC_HOPPER_FUSED_REVERSE", "1", 1);
    else if (!std::strcmp(argv[i], "--env") && i + 1 < argc) {
      const std::string assignment = argv[++i];
      const size_t eq = assignment.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "linac_cuda_lab: --env takes NAME=VALUE, not '%s'\n", assignment.c_str());
        return 2;
      }
      setenv(assignment.substr(0, eq).c_str(), assignment.substr(eq + 1).c_str(), 1);
    } else if (!std::strcmp(argv[i], "--hopper-auto")) {
      for (const char* name : {"LINAC_HOPPER_LATE", "LINAC_HOPPER_OVERLAP", "LINAC_HOPPER_FUSED_REVERSE",
                               "LINAC_HOPPER_PREPARED_SCORES"})
        setenv(name, "auto", 1);
    }
    else if (!std::strcmp(argv[i], "--no-bench")) do_bench = false;
    else if (!std::strcmp(argv[i], "--untimed")) g_untimed = true;
    else if (!std::strcmp(argv[i], "--no-bwd")) do_bwd = false;
    else if (!std::strcmp(argv[i], "--no-fwd")) do_fwd = false;
    else if (!std::strcmp(argv[i], "--bench-rows") && i + 1 < argc) benchRows = argv[++i];
    else if (!std::strcmp(argv[i], "--cases") && i + 1 < argc) caseFilter = argv[++i];
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--dump-failing") && i + 1 < argc) g_dump_dir = argv[++i];
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("linac_cuda_lab: no CUDA device, skipping\n");
    return 77;
  }
  rng.seed(seed);
  g_seed = seed;
  setenv("LINAC_AUTOTUNE_CACHE", "", 0);  // each lab process times its own choices, unless told a file
  cudaDeviceProp prop;
  LINAC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), seed %llu\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, (unsigned long long)seed);
  try {
    std::printf("%-28s %-5s %-34s %-4s %10s  %s\n", "kind", "dtype", "shape", "out", "rel-RMS", "result");
    if (!bench_only) {
      checkAutotune();
      if (quick) runQuickCases(do_bwd);
      else runFullCases(fwd_only, do_bwd);
    }
    std::printf("\n%s: %d check(s) failed\n", g_fail ? "FAIL" : "ALL PASS", g_fail);
    if (do_bench && do_fwd) bench();
    if (do_bench && do_bwd) benchBackward();
  } catch (const std::exception& e) {
    std::printf("linac_cuda_lab: error: %s\n", e.what());
    return 1;
  }
  return g_fail ? 1 : 0;
}
