#!/usr/bin/env bash
# The H200 runs, in two device calls (each bounded so its summary prints inside the call's limit):
#
#   bash bench/run_h200.sh prepare [seconds]
#     warm     fla's Triton compiles + autotuning are slow (its RetNet op alone took 120 s, and its
#              340m model did not finish one step in 170 s): one process per fla op and per fla
#              model fills Triton's cache (kernels, and autotune results through
#              TRITON_CACHE_AUTOTUNING=1) in parallel, untimed, while linac builds and verifies.
#     build    linac's runtime with CUDA (no MLIR there; committed generated/), NCCL included.
#     verify   the specs on CUDA against the float64 oracle (fp32 + bf16, all sections).
#     lab      the CUDA kernel lab: its small cases under compute-sanitizer memcheck and
#              racecheck, then the lab itself (LAB=full: every case; default quick).
#     The autotune results and the winning kernels come back as $OUT/triton-cache.tgz: keep it as
#     .fla/triton-cache.tgz (ignored) and carry it into the next call, which unpacks it when its
#     own cache is gone (a fresh machine).
#     verify and the lab share the GPU with the warm-up, so fla's autotuning picks its configurations
#     under contention (2026-12-05: its RetNet forward 3x slower than on a quiet GPU): for a cache
#     whose timings are to be quoted, `VERIFY_SPECS= SANITIZE_FUSED= LAB=none` leaves it the GPU.
#
#   bash bench/run_h200.sh all [seconds]   both in one call (with a carried cache and short lists)
#
#   bash bench/run_h200.sh profile [seconds]
#     `linac train --preset 340m --profile 3` for MODELS at 3:1, T=4096, bf16, vocab 32000: the
#     step's time by category and the top kernels ($OUT/profile-<model>.txt), the Chrome traces.
#
#   bash bench/run_h200.sh lab [seconds]
#     the kernel lab (built in the call while fla warms, or with LAB_PREBUILT=1 the carried
#     build-cuda/linac_cuda_lab.xz (or .gz), e.g. KEEP_LAB=1's from an earlier call), then its cases
#     (LAB_ARGS, e.g. "--no-bench --hopper-column-inverse" for an alternative Hopper path) once fla has warmed
#     with the GPU to itself, then the lab's timings and fla's ops (at each of WARM_SHAPES), each with
#     the GPU alone, and the two side by side (bench/compare.py); LAB_ARGS2 runs the cases again under
#     other switches (e.g. "--fwd-only --no-bench --hopper-prepared-scores"); LAB_BENCH2_ARGS adds a
#     second timing process under those switches (e.g. an opt-in path's rows). CASES=0 skips the cases, TIMINGS=0
#     the timings (a call that builds and checks, then one that times on the still-warm machine);
#     PROFILE="ROW:REGEX" adds an ncu profile of a timing row's kernels (see lab());
#     PROFILE_SOURCE="ROW:REGEX" samples one kernel's stalls per SASS instruction.
#
#   bash bench/run_h200.sh ab [seconds]
#     the kernel lab A / B in one call: build-cuda/linac_cuda_lab.xz (this tree's lab, built here with
#     LAB_BUILD_ONLY=1) and build-cuda/lab_before.xz (the baseline's, built from an earlier commit in
#     a git worktree), both carried, stripped and xz-compressed (~15 MB each; .gz is read too). The new lab's cases (AB_CASES_ARGS, default
#     --no-bench; each failing backward draw comes back in $OUT/failing_draws.tgz for
#     tests/runtime/cuda/delta_bwd_replay.py), with AB_CASES2_ARGS its cases again under those switches
#     (e.g. "--no-bench --hopper-fused-reverse": an opt-in path and the default in one call),
#     compute-sanitizer memcheck / racecheck over its quick cases (AB_SANITIZE_ARGS, default
#     AB_CASES_ARGS; SANITIZE=0 skips; SANITIZE_TOOLS and RACECHECK_ARGS as run_lab.sh's),
#     with AB_AUTO=1 the quick cases once more with the timed choices (--hopper-auto),
#     then each timing row group of AB_ROWS (default "delta- additive-diag"), AB_ROUNDS times (default
#     2), the baseline and the new lab (AB_BENCH_ARGS) in alternating order, each process with the GPU
#     to itself; bench/ab_summary.py prints each row's medians, their ratio and the spread.
#
#   bash bench/run_h200.sh fit [seconds]
#     `linac train --find-batch` (issue 14's largest batch x sequence that fits): FIT_MODELS (default
#     "gated_deltanet:340m gla:340m gated_deltanet_6h:1.3b") at 3:1, T=4096 (FIT_SEQ), vocab 32000,
#     with and without --checkpointing; one JSON line each into $OUT/fit.jsonl.
#
#   bash bench/run_h200.sh gputests [seconds]
#     the ctest entries labelled gpu (CUDA layers, generation parity, fla import parity) in a
#     tests-enabled CUDA build; carry .deps/googletest (bench/fetch_deps.sh) and .fla/site.
#
#   bash bench/run_h200.sh checks [seconds]
#     gputests, then `linac verify --device cuda` (VERIFY_SPECS at VERIFY_SHAPES) with its linac.
#
#   bash bench/run_h200.sh reproduce [seconds]
#     bench/reproduce.sh on the GPU (PART=lm, then PART=mqar in a second call on the warm machine):
#     the small-scale study's table ($OUT/table.md), both results.csv, the plots.
#
#   bash bench/run_h200.sh parity [seconds]
#     linac's Python package (python/, built with CUDA) beside fla's ops on identical inputs:
#     bench/fla_parity.py's rel-RMS of outputs, final states and gradients ($OUT/parity.jsonl);
#     then fla's hybrids (PARITY_MODELS at 340m widths, PARITY_MODEL_ARGS: 8 layers, B2 T2048) for 30
#     steps with fla's kernels and with linac's swapped in (bench/fla_swap.py): the two loss curves
#     ($OUT/parity-train.jsonl).
#
#   bash bench/run_h200.sh time [seconds]
#     train    fla's 340m hybrids (bench/fla_model_bench.py) from the warm cache, then
#              `linac train --preset 340m` for the same Gated DeltaNet 3:1 and GLA 3:1 (B=4 T=4096
#              bf16; VOCAB=32000 (default: fla's vocabulary size, bench/tokenizer32k.model for linac)
#              or VOCAB=256 (bytes) on both sides). RUN_LONG=1 adds a 200-step 340m run, RUN_NCCL=1
#              the NCCL path at world size 1, RUN_TINY=1 the tiny preset on CUDA.
#              BENCH_FUSED=1 also benches DeltaNet and Gated DeltaNet with the backward's opt-in
#              fused reverse pass (LINAC_HOPPER_FUSED_REVERSE=1), in a second table.
#     bench    `linac bench` for the specs, then fla's ops from the warm cache.
#     Each side has the GPU to itself while it is timed.
#
# Knobs (space-separated lists; set but empty: none): VERIFY_SPECS, VERIFY_LIMIT (seconds per spec, default 120), BENCH_SPECS (default: every linear spec), FLA_OPS
# (default: every op), BENCH_SHAPES (B,T,H,D list for `linac bench` and fla's ops in time mode, default
# 8,4096,8,128; issue 11's others: 2,16384,4,128 8,4096,8,64 8,4096,8,256), WARM_SHAPES (default BENCH_SHAPES), FLA_WIDE_SHAPE (fla's Gated DeltaNet also at this B,T,H,DKxDV: default its 340m
# heads, 4,4096,4,256x512; empty skips it), LAB=quick|full|none, WARM_LIMIT (seconds for the warm-up, default 400), MODELS (default "gated_deltanet gla"; empty skips training), WARM_OPS and
# WARM_MODELS (what prepare warms; default FLA_OPS and MODELS), FLA_MODEL_LIMIT (seconds for each fla model in
# time mode, default 100: what its warm-up left uncompiled compiles inside it), FLA_BYPASS=1 (time fla's gated
# backward despite its Hopper guard: bench/fla_guard.py), FLA=0 (linac only: no fla warm-up, ops or
# models), SANITIZE_FUSED (specs whose fused prologue path `linac verify` runs under compute-sanitizer
# memcheck in prepare, small shape; default gated_deltanet hgrn2), NSYS=1 (time mode: per-kernel breakdown
# of `linac bench` for gla and deltanet under nsys, where installed; the H200 image has ncu only). fla's wheels must be unpacked in .fla/site.
# Results under $OUT (8 files at most).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: bash bench/run_h200.sh prepare|time|all|lab|ab|profile|fit|gputests|checks|reproduce|parity [seconds]}
BUDGET=${2:-570}
OUT=${OUT:-out}; mkdir -p "$OUT" build-gpu
# Triton records absolute paths in its cache index, so the caches live at fixed paths: ALL holds
# every autotuning candidate, MIN (what travels) only the autotune results and the winners.
ALL=/tmp/linac-triton-all MIN=/tmp/linac-triton-min
# fla 0.6 dispatches to FlashQLA / TileLang kernels when they are installed: pure Triton is timed.
export TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0 FLA_TILELANG=0
SHAPES=${VERIFY_SHAPES:-2,150,2,64,128;1,130,1,256,128}
SHAPE_ARGS=(); IFS=';' read -ra _shapes <<< "$SHAPES"; for _s in "${_shapes[@]}"; do SHAPE_ARGS+=(--shape "$_s"); done
LINEAR_SPECS=$(for s in specs/*.yaml; do n=$(basename "$s" .yaml); [ "$n" = attention ] || echo "$n"; done)
VERIFY_SPECS=${VERIFY_SPECS-$LINEAR_SPECS}  # set but empty: none (prepare: fla warms with the GPU to itself)
BENCH_SPECS=${BENCH_SPECS-$(echo "$LINEAR_SPECS" | grep -v -e gated_delta_diag -e gated_deltanet_6h)}  # fla has neither
FLA_OPS=${FLA_OPS-retnet mamba2 gla hgrn2 rwkv6 deltanet gated_deltanet hgrn sdpa}
MODELS=${MODELS-gated_deltanet gla}
WARM_OPS=${WARM_OPS-$FLA_OPS}
BENCH_SHAPES=${BENCH_SHAPES-8,4096,8,128}  # B,T,H,D for `linac bench` and fla's ops (time mode)
WARM_SHAPES=${WARM_SHAPES-$BENCH_SHAPES}
FLA_WIDE_SHAPE=${FLA_WIDE_SHAPE-4,4096,4,256x512}  # Gated DeltaNet's 340m heads for fla too; empty: none
WARM_MODELS=${WARM_MODELS-$MODELS}
BYPASS=(); [ "${FLA_BYPASS:-0}" = 1 ] && BYPASS=(--bypass-hopper-guard)
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
# Bounded phase: run "$@" with at most min($1, time left - reserve) seconds.
# A phase the budget leaves no time for is skipped (rc 124), saying so where its output goes.
phase() {
  local t=$1; shift; local l=$(( $(left) - 40 )); [ "$l" -lt "$t" ] && t=$l
  if [ "$t" -le 5 ]; then echo "skipped ($(left) s of the budget left, 40 reserved): $*"; return 124; fi
  timeout "$t" "$@"
}
L=./build-gpu/bin/linac
WARM=/tmp/linac-fla-warm; SUM=/tmp/linac-train-summary
rm -rf "$WARM" "$SUM"; mkdir -p "$WARM" "$SUM"

build() {
  if [ -x "$L" ] && [ "${REBUILD:-0}" != 1 ]; then echo "build: reusing build-gpu"; return 0; fi
  bash bench/build_gpu.sh "$OUT" || return 1
  echo "build: $((SECONDS - start)) s"
}

restore_cache() {
  if [ ! -d "$MIN" ] && [ -f .fla/triton-cache.tgz ]; then
    tar -C / -xzf .fla/triton-cache.tgz && echo "triton cache restored"
  fi
}

# One warm-only process per fla op, in parallel, against Triton cache $1, beside one process per
# fla model in turn (two 340m models at once ran out of an H100's memory, session 25); waits for
# all of them (at most $2 seconds).
warm_fla() {
  local cache=$1 limit=$2 pids=()
  (  # WARM_BATCH (default 4, the timed batch: some autotune keys depend on it)
    for v in $WARM_MODELS; do
      out="$WARM/model_$v.$(basename "$cache").out" t0=$SECONDS  # (a subshell: no locals needed)
      TRITON_CACHE_DIR=$cache PYTHONPATH=.fla/site timeout "$limit" python3 bench/fla_model_bench.py --variant "$v" \
        --batch "${WARM_BATCH:-4}" --seq-len 4096 --vocab "${VOCAB:-32000}" --warmup 1 --steps 0 "${BYPASS[@]}" \
        > "$out" 2>&1
      # keep_winners greps "warmed": a model cut by the limit (rc 124) has not filled the cache
      echo "warmed model $v rc=$? in $((SECONDS - t0)) s (limit $limit s)" >> "$out"
    done
  ) &
  pids+=($!)
  local sh
  for sh in $WARM_SHAPES; do  # autotune keys depend on the dims: one process per op and shape
    for c in $WARM_OPS; do
      TRITON_CACHE_DIR=$cache PYTHONPATH=.fla/site timeout "$limit" python3 bench/fla_bench.py --only "$c" --warm-only \
        --shape "$sh" "${BYPASS[@]}" > "$WARM/op_$c.${sh//,/_}.$(basename "$cache").out" 2>&1 &
      pids+=($!)
    done
  done
  if [ -n "$FLA_WIDE_SHAPE" ]; then  # Gated DeltaNet at its 340m heads (autotune keys depend on dims)
    TRITON_CACHE_DIR=$cache PYTHONPATH=.fla/site timeout "$limit" python3 bench/fla_bench.py --only gated_deltanet \
      --shape "$FLA_WIDE_SHAPE" --warm-only "${BYPASS[@]}" > "$WARM/op_gdn_wide.$(basename "$cache").out" 2>&1 &
    pids+=($!)
  fi
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
}

prepare() {
  # With a carried cache, warm straight into it (only what it lacks compiles); else every
  # candidate goes to ALL first and only the winners are copied to MIN below.
  restore_cache
  local target=$ALL
  if [ -d "$MIN" ]; then target=$MIN; else rm -rf "$ALL"; fi
  local warm_pid=
  if [ "${FLA:-1}" = 1 ]; then warm_fla "$target" "${WARM_LIMIT:-400}" & warm_pid=$!; fi
  build || exit 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  local lab_args=(--quick --no-bench) lab_pid=
  [ "${LAB:-quick}" = full ] && lab_args=(--no-bench)
  if [ "${LAB:-quick}" != none ]; then
    # half the cores: verify's float64 oracle runs beside this build
    JOBS=8 OUT=/tmp/linac-lab timeout 330 bash tests/runtime/cuda/run_lab.sh "${lab_args[@]}" > /tmp/lab.log 2>&1 &
    lab_pid=$!
  fi

  verify_cuda
  for n in ${SANITIZE_FUSED-gated_deltanet hgrn2}; do  # the fused prologue path (fused section)
    phase 90 compute-sanitizer --tool memcheck --error-exitcode 9 $L verify "specs/$n.yaml" --device cuda \
      --shape 1,70,1,64,64 > /tmp/sanitize_fused.log 2>&1
    echo "memcheck fused $n rc=$? $(grep -E "ERROR SUMMARY" /tmp/sanitize_fused.log | tail -1) $(tail -1 /tmp/sanitize_fused.log)"
    cat /tmp/sanitize_fused.log >> "$OUT/verify.log"
  done
  [ -n "$lab_pid" ] && wait "$lab_pid"
  grep -E "check rc|lab rc|ERROR SUMMARY|FAIL|compile failed|build took" /tmp/lab.log | head -24
  cat /tmp/lab.log /tmp/linac-lab/sanitizer.log > "$OUT/lab.log" 2>/dev/null

  [ -z "$warm_pid" ] && return 0  # FLA=0
  wait "$warm_pid"
  keep_winners "$target"
}

# `linac verify --device cuda` for VERIFY_SPECS at VERIFY_SHAPES, into $OUT/verify.log.
verify_cuda() {
  : > "$OUT/verify.log"
  for n in $VERIFY_SPECS; do
    # line-buffered, so a run cut by its budget still shows how far it got
    phase "${VERIFY_LIMIT:-120}" stdbuf -oL $L verify "specs/$n.yaml" --device cuda "${SHAPE_ARGS[@]}" > /tmp/verify_one.log 2>&1
    echo "verify cuda $n rc=$? $(tail -1 /tmp/verify_one.log)"
    grep -E "FAIL" /tmp/verify_one.log | head -4
    cat /tmp/verify_one.log >> "$OUT/verify.log"
  done
  echo "verify done: $((SECONDS - start)) s"
}

# After warm_fla into $1: fla's autotune winners only (MIN), tarred into $OUT unless timings follow.
keep_winners() {
  local target=$1
  echo "fla warm-up done: $((SECONDS - start)) s"
  # the ops' and models' outcomes: "warmed ...", a model's first step, any error (fla_model_bench's
  # JSON row says "error")
  grep -hiE "warmed|error|step 0:" "$WARM"/*.out | head -14
  # KEEP_ALL=1: a `time` call follows on this warm machine and reads ALL itself (no second warm-up)
  if [ "$target" = "$ALL" ] && [ "${KEEP_ALL:-0}" = 1 ]; then
    cat "$WARM"/*.out > "$OUT/warm.log"
    echo "fla cache kept in $ALL for the next call on this machine"
    return 0
  fi
  if [ "$target" = "$ALL" ]; then
    # The winners only: autotune results copied to MIN, then each op / model once more against
    # MIN (no candidates benchmarked: only the chosen configs compile).
    (cd "$ALL" && find . -name '*.autotune.json' | while read -r f; do
       mkdir -p "$MIN/$(dirname "$f")"; cp "$f" "$MIN/$f"; done)
    local t=$(( $(left) - 25 )); [ "$t" -gt 150 ] && t=150
    [ "$t" -gt 10 ] && warm_fla "$MIN" "$t"
  fi
  echo "fla cache: $((SECONDS - start)) s ($(find "$MIN" -name '*.cubin' | wc -l) kernels kept)"
  cat "$WARM"/*.out > "$OUT/warm.log"
  [ "$MODE" = all ] && return 0  # the timings follow in this call: nothing to carry
  tar -C / -czf "$OUT/triton-cache.tgz" --exclude='*.ptx' --exclude='*.ttir' --exclude='*.ttgir' \
    --exclude='*.llir' --exclude='*.source' "${MIN#/}"
  ls -la "$OUT/triton-cache.tgz"
}

# The kernel lab (carried as build-cuda/linac_cuda_lab, or built here when absent, while fla's ops
# warm Triton's cache), then its cases (LAB_ARGS, default the forward cases) once the warm-up is
# done: fla autotunes with the GPU to itself (autotuned beside the lab's cases it chose configurations
# 1.5x slower, 2026-12-04), then, with the GPU to each alone, the lab's timings and fla's ops.
# LAB_BENCH2_ARGS: a second timing process of the lab under other switches (an opt-in path), after
# fla's ops so that a call cut short loses it first.
lab_bench2() {
  [ -n "${LAB_BENCH2_ARGS:-}" ] || return 0
  echo "== lab timings with $LAB_BENCH2_ARGS" >> "$OUT/lab_bench.log"
  # shellcheck disable=SC2086
  # LAB_BENCH2_LIMIT: seconds for it (each D256 row draws ~70M-element inputs on the host first)
  phase "${LAB_BENCH2_LIMIT:-90}" ./build-cuda/linac_cuda_lab --bench-only $LAB_BENCH2_ARGS >> "$OUT/lab_bench.log" 2>&1
  echo "lab timings ($LAB_BENCH2_ARGS) rc=$? ($((SECONDS - start)) s)"
  sed -n '/^== lab timings with/,$p' "$OUT/lab_bench.log" | grep -E "^kind|delta|GDN|DeltaNet"
}

lab() {
  restore_cache
  local target=$ALL warm_pid=
  if [ -d "$MIN" ]; then target=$MIN; else rm -rf "$ALL"; fi
  if [ "${FLA:-1}" = 1 ]; then warm_fla "$target" "${WARM_LIMIT:-400}" & warm_pid=$!; fi
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  # LAB_PREBUILT=1: the carried build-cuda/linac_cuda_lab.xz (or .gz) is run; else the lab is built here
  # (a warm machine keeps an older call's binary, which may not be this tree's)
  local built_here=0
  if [ "${LAB_PREBUILT:-0}" = 1 ]; then
    unpack_lab linac_cuda_lab build-cuda/linac_cuda_lab || return 1
  else  # 16 jobs, beside the warm-up (CPU work only)
    rm -f build-cuda/linac_cuda_lab
    LAB_BUILD_ONLY=1 OUT=/tmp/linac-lab timeout 300 bash tests/runtime/cuda/run_lab.sh > "$OUT/lab.log" 2>&1
    local rc=$?
    grep -E "build took|compile failed" "$OUT/lab.log"
    [ "$rc" = 0 ] || { echo "lab build failed (rc=$rc)"; grep -E "error" "$OUT/lab.log" | head -20; return 1; }
    cp /tmp/linac-lab/ptxas.log /tmp/linac-lab/sass.log "$OUT/" 2>/dev/null
    built_here=1
  fi
  local fla_warmed=0
  [ -n "$warm_pid" ] && wait "$warm_pid" && echo "fla warm-up done: $((SECONDS - start)) s"
  [ -n "$warm_pid" ] && fla_warmed=1
  warm_pid=
  if [ "${CASES:-1}" = 1 ]; then
    LAB_PREBUILT=1 SANITIZE=${SANITIZE:-0} OUT=/tmp/linac-lab timeout 480 \
      bash tests/runtime/cuda/run_lab.sh ${LAB_ARGS:---fwd-only --no-bench} >> "$OUT/lab.log" 2>&1
    echo "lab rc=$? ($((SECONDS - start)) s)"
    grep -E "FAIL|error|ALL PASS" "$OUT/lab.log" | head -30
    if [ -n "${LAB_ARGS2:-}" ]; then  # the cases again under other switches (an opt-in path pinned)
      echo "== lab cases with $LAB_ARGS2" >> "$OUT/lab.log"
      # shellcheck disable=SC2086
      LAB_PREBUILT=1 SANITIZE=0 OUT=/tmp/linac-lab2 timeout 300 bash tests/runtime/cuda/run_lab.sh $LAB_ARGS2 \
        > /tmp/lab2.log 2>&1
      echo "lab ($LAB_ARGS2) rc=$? ($((SECONDS - start)) s)"
      grep -E "FAIL|error|ALL PASS" /tmp/lab2.log | head -20
      cat /tmp/lab2.log >> "$OUT/lab.log"
    fi
    # the sanitizers' own log (its failing lines, when a check fails under them)
    [ "${SANITIZE:-0}" = 1 ] && cp /tmp/linac-lab/sanitizer.log "$OUT/" 2>/dev/null
  fi
  # KEEP_LAB=1: the binary built here comes back, to carry into the next call as
  # build-cuda/linac_cuda_lab.gz (gunzip it there: run_lab.sh then skips the build).
  [ "${KEEP_LAB:-0}" = 1 ] && [ "$built_here" = 1 ] && gzip -c build-cuda/linac_cuda_lab > "$OUT/linac_cuda_lab.gz"
  # PROFILE="ROW:REGEX ..." profiles the first PROFILE_COUNT (default 2) kernels matching REGEX in
  # the lab's timing row ROW (--bench-rows), e.g. PROFILE="GDN:deltaPrepare|stateOutput", with the
  # GPU otherwise idle; PROFILE_ARGS (default --no-bwd) are the lab's other flags: "" includes the
  # backward rows (e.g. PROFILE="GDN:deltaBwd" PROFILE_COUNT=5 PROFILE_ARGS="", or "--no-fwd" for the
  # backward's alone). REGEX searches the demangled name, so "hopper::" keeps the wgmma stages apart
  # from the mma.sync kernels of the same name.
  # PROFILE_SOURCE="ROW:REGEX ..." samples the first matching kernel's warp stalls per SASS
  # instruction (ncu --set full, source page as CSV): where the kernel's time goes, line by line.
  local item n=0
  for item in ${PROFILE_SOURCE:-}; do
    n=$((n + 1))  # outputs numbered in PROFILE_SOURCE's order (two items may share a row)
    local rep=/tmp/ncu_src_$n tag="$n-${item%%:*}"
    phase 120 ncu --set full --import-source yes --kernel-name-base demangled --kernel-name "regex:${item#*:}" --launch-count 1 -f -o "$rep" \
      ./build-cuda/linac_cuda_lab --bench-only ${PROFILE_ARGS---no-bwd} --bench-rows "${item%%:*}" > /dev/null 2>&1
    echo "ncu source $item rc=$? ($((SECONDS - start)) s)"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_source_$tag.csv" 2>&1
    ncu -i "$rep.ncu-rep" --page details --section WarpStateStats --section InstructionStats \
      --section MemoryWorkloadAnalysis > "$OUT/ncu_details_$tag.txt" 2>&1
    python3 bench/ncu_source_top.py "$OUT/ncu_source_$tag.csv" | head -40
  done
  for item in ${PROFILE:-}; do
    phase 90 ncu --kernel-name-base demangled --kernel-name "regex:${item#*:}" --launch-skip "${PROFILE_SKIP:-0}" --launch-count "${PROFILE_COUNT:-2}" \
      --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section LaunchStats \
      ./build-cuda/linac_cuda_lab --bench-only ${PROFILE_ARGS---no-bwd} --bench-rows "${item%%:*}" \
      > "$OUT/ncu_${item%%:*}.txt" 2>&1
    echo "ncu ${item%%:*} rc=$? ($((SECONDS - start)) s)"
    grep -E "^  [a-zA-Z].*Kernel|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput" \
      "$OUT/ncu_${item%%:*}.txt" | head -$((7 * ${PROFILE_COUNT:-2}))
  done
  [ "${TIMINGS:-1}" = 1 ] || return 0
  phase 200 ./build-cuda/linac_cuda_lab --bench-only ${LAB_BENCH_ARGS---no-bwd} > "$OUT/lab_bench.log" 2>&1
  echo "lab timings rc=$? ($((SECONDS - start)) s)"
  sed -n '/^kind/,$p' "$OUT/lab_bench.log"
  [ "$fla_warmed" = 1 ] || { lab_bench2; return 0; }
  : > "$OUT/fla_bench.jsonl"
  local sh
  for sh in $WARM_SHAPES; do  # the shapes fla warmed (default BENCH_SHAPES, S* alone)
    for c in $FLA_OPS; do
      TRITON_CACHE_DIR=$target PYTHONPATH=.fla/site phase 60 python3 bench/fla_bench.py --only "$c" --shape "$sh" \
        "${BYPASS[@]}" >> "$OUT/fla_bench.jsonl" 2>> /tmp/fla_bench.err || echo "fla op $c at $sh failed or timed out"
    done
  done
  if [ -n "$FLA_WIDE_SHAPE" ]; then  # beside the lab's 'GDN 340m heads' rows
    TRITON_CACHE_DIR=$target PYTHONPATH=.fla/site phase 60 python3 bench/fla_bench.py --only gated_deltanet \
      --shape "$FLA_WIDE_SHAPE" "${BYPASS[@]}" >> "$OUT/fla_bench.jsonl" 2>> /tmp/fla_bench.err \
      || echo "fla gated_deltanet at $FLA_WIDE_SHAPE failed or timed out"
  fi
  echo "fla ops done ($((SECONDS - start)) s)"; tail -3 /tmp/fla_bench.err
  [ -s /tmp/fla_bench.err ] && tail -200 /tmp/fla_bench.err > "$OUT/fla_bench.err"  # why an op failed
  cat "$OUT/fla_bench.jsonl"
  # the lab's default dispatch beside fla's ops: one table a shape, the ratios' geometric mean
  python3 bench/lab_rows.py "$OUT/lab_bench.log" --commit "${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" \
    --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > /tmp/lab_rows.jsonl \
    && python3 bench/compare.py /tmp/lab_rows.jsonl "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
  lab_bench2
}

timed() {
  restore_cache
  export TRITON_CACHE_DIR=$MIN
  # a prepare call with KEEP_ALL=1 on this still-warm machine left every candidate in ALL
  [ ! -d "$MIN" ] && [ -d "$ALL" ] && TRITON_CACHE_DIR=$ALL && echo "fla cache: $ALL (this machine's warm-up)"
  build || exit 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  rm -f "$OUT"/*.jsonl /tmp/linac_bench.txt
  local tokenizer=()
  case "${VOCAB:=32000}" in
    32000) tokenizer=(--tokenizer bench/tokenizer32k.model) ;;
    256) ;;
    *) echo "VOCAB must be 32000 or 256" >&2; return 2 ;;
  esac
  for v in $MODELS; do
    [ "${FLA:-1}" = 1 ] || break
    PYTHONPATH=.fla/site phase "${FLA_MODEL_LIMIT:-100}" python3 bench/fla_model_bench.py --variant "$v" --batch 4 --seq-len 4096 \
      --vocab "$VOCAB" --warmup 2 --steps 6 "${BYPASS[@]}" >> "$OUT/fla_train.jsonl" 2>> "$WARM/fla_train.err"
    local rc=$?
    echo "fla model $v rc=$rc ($((SECONDS - start)) s)"
    [ "$rc" = 0 ] || tail -4 "$WARM/fla_train.err"
  done
  local common=(--preset 340m --schedule 3:1 --device cuda --lr 3e-4 --eval-every 100000 --checkpoint-every 100000
                "${tokenizer[@]}")
  : > "$OUT/train.log"
  for v in $MODELS; do
    rm -rf "/tmp/run-$v"
    phase 70 $L train "specs/$v.yaml" "${common[@]}" --batch 4 --seq-len 4096 --steps 8 --log-every 1 \
      --out "/tmp/run-$v" > "$SUM/linac_train_$v.log" 2>&1
    echo "linac train $v rc=$? ($((SECONDS - start)) s)"; grep -E "step .*tok/s|error" "$SUM/linac_train_$v.log" | tail -2
    cp "/tmp/run-$v/metrics.jsonl" "$SUM/linac_metrics_$v.jsonl" 2>/dev/null
    cp "/tmp/run-$v/model.json" "$SUM/linac_model_$v.json" 2>/dev/null
    cp "/tmp/run-$v/config.json" "$SUM/linac_config_$v.json" 2>/dev/null
    cat "$SUM/linac_train_$v.log" >> "$OUT/train.log"
  done
  # issue 14: the fused LM head + loss against full logits, 50 steps each (LOSS_BATCH x LOSS_SEQ,
  # default 4 x 4096), the first of MODELS (default gated_deltanet)
  if [ "${RUN_LOSS_AGREE:-0}" = 1 ]; then
    local lv=${MODELS%% *}; lv=${lv:-gated_deltanet}
    for fl in on off; do
      rm -rf "/tmp/run-loss-$fl"
      phase 90 $L train "specs/$lv.yaml" "${common[@]}" --batch "${LOSS_BATCH:-4}" --seq-len "${LOSS_SEQ:-4096}" \
        --steps 50 --log-every 1 --eval-batches 1 \
        --fused-loss "$fl" --out "/tmp/run-loss-$fl" > "/tmp/loss_$fl.log" 2>&1
      echo "linac train $lv 50 steps --fused-loss $fl rc=$? ($((SECONDS - start)) s)"
      grep -E "step 50/|error" "/tmp/loss_$fl.log" | tail -1
      cat "/tmp/loss_$fl.log" >> "$OUT/train.log"
    done
    python3 bench/loss_agreement.py /tmp/run-loss-on/metrics.jsonl /tmp/run-loss-off/metrics.jsonl \
      --json "$OUT/loss_agreement.jsonl" | tee -a "$OUT/table.txt"
  fi
  if [ -n "${RUN_13B:-}" ]; then  # RUN_13B="SPEC BATCH [FLAGS]": the 1.3b preset at 3:1, T 4096, 8 steps
    read -r s13 b13 f13 <<< "$RUN_13B"
    rm -rf /tmp/run-13b
    # shellcheck disable=SC2086
    phase 150 $L train "specs/$s13.yaml" --preset 1.3b --schedule 3:1 --device cuda --lr 3e-4 --eval-every 100000 \
      --checkpoint-every 100000 --eval-batches 1 "${tokenizer[@]}" --batch "$b13" --seq-len 4096 --steps 8 --log-every 1 $f13 \
      --out /tmp/run-13b > "$SUM/linac_train_${s13}_1.3b.log" 2>&1
    echo "linac train $s13 1.3b batch $b13 ${f13:-} rc=$? ($((SECONDS - start)) s)"
    grep -E "parameters|step .*tok/s|peak|error" "$SUM/linac_train_${s13}_1.3b.log" | tail -4
    cp /tmp/run-13b/metrics.jsonl "$SUM/linac_metrics_${s13}_1.3b.jsonl" 2>/dev/null
    cp /tmp/run-13b/model.json "$SUM/linac_model_${s13}_1.3b.json" 2>/dev/null
    cp /tmp/run-13b/config.json "$SUM/linac_config_${s13}_1.3b.json" 2>/dev/null
    cat "$SUM/linac_train_${s13}_1.3b.log" >> "$OUT/train.log"
  fi
  if [ "${RUN_LONG:-0}" = 1 ]; then
    rm -rf /tmp/run-long
    phase 120 $L train specs/gated_deltanet.yaml "${common[@]}" --batch 1 --seq-len 2048 --steps 200 --log-every 25 \
      --out /tmp/run-long > /tmp/linac_train_200.log 2>&1
    echo "linac 340m 200 steps rc=$?"; grep -E "step 200/|done|nan|error" /tmp/linac_train_200.log | tail -3
    cat /tmp/linac_train_200.log >> "$OUT/train.log"
  fi
  if [ "${RUN_NCCL:-0}" = 1 ]; then
    rm -rf /tmp/run-nccl
    WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 phase 60 \
      $L train specs/gated_deltanet.yaml --preset tiny --device cuda --steps 20 --out /tmp/run-nccl > /tmp/nccl.log 2>&1
    echo "nccl world size 1 rc=$?"; grep -E "data parallel|step 20/|done|error" /tmp/nccl.log | tail -3
    cat /tmp/nccl.log >> "$OUT/train.log"
  fi
  if [ "${RUN_TINY:-0}" = 1 ]; then  # tiny preset: head dims the kernels lack run zero-padded
    rm -rf /tmp/run-tiny
    phase 60 $L train specs/gated_deltanet.yaml --preset tiny --schedule 3:1 --device cuda --steps 30 --log-every 10 \
      --out /tmp/run-tiny > /tmp/tiny.log 2>&1
    echo "tiny preset on cuda rc=$?"; grep -E "step 30/|mqar|error|nan" /tmp/tiny.log | tail -3
    cat /tmp/tiny.log >> "$OUT/train.log"
  fi

  local sh
  for sh in $BENCH_SHAPES; do
    for n in $BENCH_SPECS; do
      phase 30 $L bench "specs/$n.yaml" --device cuda --shape "$sh" --json "$OUT/linac_bench.jsonl" >> /tmp/linac_bench.txt 2>&1 \
        || echo "bench $n at $sh failed or timed out"
    done
  done
  echo "linac bench done: $((SECONDS - start)) s"
  # BENCH_FUSED=1: the delta rules again with the backward's fused reverse pass pinned
  # (LINAC_HOPPER_FUSED_REVERSE=1), into linac_bench_fused.jsonl and a second table below
  if [ "${BENCH_FUSED:-0}" = 1 ]; then
    for n in deltanet gated_deltanet; do
      phase 30 env LINAC_HOPPER_FUSED_REVERSE=1 $L bench "specs/$n.yaml" --device cuda \
        --json "$OUT/linac_bench_fused.jsonl" >> /tmp/linac_bench.txt 2>&1 || echo "fused bench $n failed or timed out"
    done
  fi
  : > "$OUT/fla_bench.jsonl"
  for sh in $BENCH_SHAPES; do
    for c in $FLA_OPS; do
      [ "${FLA:-1}" = 1 ] || break
      PYTHONPATH=.fla/site phase 40 python3 bench/fla_bench.py --only "$c" --shape "$sh" "${BYPASS[@]}" \
        >> "$OUT/fla_bench.jsonl" 2>> "$WARM/fla_bench.err" || echo "fla op $c at $sh failed or timed out"
    done
  done
  echo "fla ops done: $((SECONDS - start)) s"
  if [ "${NSYS:-0}" = 1 ] && command -v nsys > /dev/null; then
    for n in gla deltanet; do
      phase 60 nsys profile -o "/tmp/nsys_$n" --force-overwrite true $L bench "specs/$n.yaml" --device cuda \
        > /dev/null 2>&1
      nsys stats --report cuda_gpu_kern_sum --format csv "/tmp/nsys_$n.nsys-rep" 2>/dev/null \
        | python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); [print(f"  {x[\"Time (%)\"]:>6}% {float(x[\"Med (ns)\"])/1e3:9.1f} us {x[\"Name\"][:90]}") for x in r[:8]]' \
        | tee -a "$OUT/logs.txt"
    done
  fi

  echo "== from raw operands: the prologue fused into the chunk forward vs composed (separate passes)"
  grep -E "^linac bench|^(fused|composed) " /tmp/linac_bench.txt
  cat "$WARM"/*.err /tmp/linac_bench.txt >> "$OUT/logs.txt" 2>/dev/null
  cp "$OUT/fla_train.jsonl" "$SUM/" 2>/dev/null
  python3 bench/compare.py "$OUT/linac_bench.jsonl" "$OUT/fla_bench.jsonl" | tee "$OUT/table.txt"
  if [ -s "$OUT/linac_bench_fused.jsonl" ]; then
    echo "== the delta rules with LINAC_HOPPER_FUSED_REVERSE=1" | tee -a "$OUT/table.txt"
    python3 bench/compare.py "$OUT/linac_bench_fused.jsonl" "$OUT/fla_bench.jsonl" | tee -a "$OUT/table.txt"
  fi
  # COMMIT: the caller's commit (the device's copy of the tree may carry stale git metadata: session
  # 31's said bf7362a for ef6d55d's tree)
  python3 bench/train_summary.py "$SUM" --rows "$OUT/train_rows.jsonl" --commit "${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" \
    --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$OUT/table.txt"
}

# `linac train --preset 340m --profile 3` for each of MODELS at 3:1 (B=4 T=4096 bf16, the 32,000-entry
# SentencePiece vocabulary): the step's time by category into $OUT/profile-<model>.txt, the Chrome
# trace into $OUT/trace-<model>.json.gz. The GPU build needs libsentencepiece for --tokenizer.
profiled() {
  build || exit 1
  for v in $MODELS; do
    rm -rf "/tmp/prof-$v"
    phase 240 $L train "specs/$v.yaml" --preset 340m --schedule 3:1 --device cuda --tokenizer bench/tokenizer32k.model \
      --batch 4 --seq-len 4096 --steps 6 --profile 3 --log-every 1 --lr 3e-4 --eval-every 100000 --eval-batches 1 \
      --checkpoint-every 100000 --out "/tmp/prof-$v" > "$OUT/profile-$v.log" 2>&1
    echo "linac profile $v rc=$?"; grep -E "step .*tok/s|error" "$OUT/profile-$v.log" | tail -2
    cp "/tmp/prof-$v/profile/table.txt" "$OUT/profile-$v.txt" && cat "$OUT/profile-$v.txt"
    gzip -c "/tmp/prof-$v/profile/trace.json" > "$OUT/trace-$v.json.gz"
  done
}

# The kernel lab A / B (see the header): correctness of the new lab, then the timing rows of both.
# A carried lab binary, build-cuda/NAME.xz (stripped, xz: two labs fit one carry) or NAME.gz,
# unpacked to DEST.
unpack_lab() {  # NAME DEST
  local src=build-cuda/$1
  if [ -f "$src.xz" ]; then xz -dc "$src.xz" > "$2"
  elif [ -f "$src.gz" ]; then gunzip -c "$src.gz" > "$2"
  else echo "build-cuda/$1.xz or .gz missing (carry it)"; return 1; fi && chmod +x "$2"
}

ab() {
  local b rows
  unpack_lab linac_cuda_lab /tmp/lab_after || return 1
  unpack_lab lab_before /tmp/lab_before || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  rm -rf /tmp/lab_draws && mkdir -p /tmp/lab_draws
  phase "${AB_CASES_LIMIT:-120}" /tmp/lab_after ${AB_CASES_ARGS:---no-bench} --dump-failing /tmp/lab_draws > "$OUT/ab_cases.log" 2>&1
  echo "cases rc=$? ($(grep -c PASS "$OUT/ab_cases.log") pass, $((SECONDS - start)) s)"
  grep -E "FAIL" "$OUT/ab_cases.log" | head -12
  if [ -n "${AB_CASES2_ARGS:-}" ]; then  # the cases once more with another path's switches, e.g. an opt-in
    # shellcheck disable=SC2086
    phase 120 /tmp/lab_after $AB_CASES2_ARGS --dump-failing /tmp/lab_draws > "$OUT/ab_cases2.log" 2>&1
    echo "cases ($AB_CASES2_ARGS) rc=$? ($(grep -c PASS "$OUT/ab_cases2.log") pass, $((SECONDS - start)) s)"
    grep -E "FAIL" "$OUT/ab_cases2.log" | head -12
  fi
  if compgen -G "/tmp/lab_draws/*.bin" > /dev/null; then  # one file back, however many failed
    tar -C /tmp -czf "$OUT/failing_draws.tgz" lab_draws
    echo "failing backward draws: failing_draws.tgz (tests/runtime/cuda/delta_bwd_replay.py replays them)"
  fi
  if [ "${SANITIZE:-1}" = 1 ]; then
    local tool
    : > "$OUT/ab_sanitizer.log"
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do  # as run_lab.sh: RACECHECK_ARGS, e.g. --racecheck-report all
      local extra=()
      [ "$tool" = racecheck ] && read -ra extra <<< "${RACECHECK_ARGS:-}"
      phase 90 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 /tmp/lab_after --quick --untimed \
        ${AB_SANITIZE_ARGS:-${AB_CASES_ARGS:---no-bench}} >> "$OUT/ab_sanitizer.log" 2>&1
      echo "$tool rc=$? ($((SECONDS - start)) s)"
    done
    grep -E "SUMMARY" "$OUT/ab_sanitizer.log"
  fi
  if [ "${AB_AUTO:-0}" = 1 ]; then  # the quick cases with the timed choices (autotune.h)
    phase 60 /tmp/lab_after --quick --no-bench --hopper-auto > "$OUT/ab_auto.log" 2>&1
    echo "auto cases rc=$? ($((SECONDS - start)) s)"
    grep -E "autotune|FAIL|ALL PASS" "$OUT/ab_auto.log" | head -12
  fi
  # AB_ROUNDS rounds, the order of the two binaries alternating (the GPU moves unchanged code
  # by 5-20% from one process to the next: bench/NOTES.md, 2026-12-05); bench/ab_summary.py
  # takes the medians.
  local r order
  for rows in ${AB_ROWS:-delta- additive-diag}; do
    : > "$OUT/ab_${rows%-}_before.log"; : > "$OUT/ab_${rows%-}_after.log"
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
      order="before after"; [ $((r % 2)) = 0 ] && order="after before"
      for b in $order; do
        echo "== round $r" >> "$OUT/ab_${rows%-}_$b.log"
        # AB_BENCH_LIMIT: seconds a process (the D256 rows draw ~70M-element inputs on the host first)
        phase "${AB_BENCH_LIMIT:-60}" "/tmp/lab_$b" --bench-only ${AB_BENCH_ARGS:-} --bench-rows "$rows" \
          >> "$OUT/ab_${rows%-}_$b.log" 2>&1
        echo "$rows round $r $b rc=$? ($((SECONDS - start)) s)"
      done
    done
    python3 bench/ab_summary.py "$OUT/ab_${rows%-}_before.log" "$OUT/ab_${rows%-}_after.log"
  done
}

# `linac train --find-batch` for each spec:preset of FIT_MODELS, plain and with --checkpointing:
# the trials (batch, peak memory, step time) and the largest batch, as JSON lines in $OUT/fit.jsonl.
fit() {
  build || exit 1
  : > "$OUT/fit.jsonl"
  for item in ${FIT_MODELS:-gated_deltanet:340m gla:340m gated_deltanet_6h:1.3b}; do
    for ck in "" --checkpointing; do
      phase 200 $L train "specs/${item%%:*}.yaml" --preset "${item#*:}" --schedule 3:1 --device cuda \
        --tokenizer bench/tokenizer32k.model --seq-len "${FIT_SEQ:-4096}" --find-batch $ck > /tmp/fit.log 2>&1
      echo "fit $item ${ck:-plain} rc=$? ($((SECONDS - start)) s)"; grep -E "^batch|^largest|^not even|error" /tmp/fit.log
      grep '^{"T"' /tmp/fit.log >> "$OUT/fit.jsonl"
    done
  done
}

# The ctest entries labelled gpu (besides the kernel lab, which `lab` runs): CUDA layers, generation
# parity, fla import parity, ... in a tests-enabled CUDA build (build-gpu-tests), GoogleTest from
# the carried .deps/googletest (bench/fetch_deps.sh) since the image has none; carry .fla/site for
# the fla parity. GPU_TESTS (a ctest -R regex) narrows them; GPU_TEST_TARGETS names the executables
# they need (default the four the gpu entries run today).
gputests() { gputests_build && gputests_run; }

gputests_build() {
  local torch_prefix gloo=()
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  [ -f .deps/include/gloo/config.h ] && gloo=(-DLINAC_GLOO_INCLUDE_DIR="$PWD/.deps/include")
  cmake -S . -B build-gpu-tests -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINAC_ENABLE_CUDA=ON -DLINAC_ENABLE_TESTS=ON \
    -DLINAC_ENABLE_COMPILER=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" -DLINAC_CUTLASS_INCLUDE_DIR="$(bash bench/cutlass_include.sh)" \
    -DLINAC_GTEST_SOURCE_DIR="$PWD/.deps/googletest" "${gloo[@]}" > "$OUT/gputests.log" 2>&1 \
    || { tail -30 "$OUT/gputests.log"; return 1; }
  local targets
  targets=$(ctest --test-dir build-gpu-tests -N -L gpu -E linac_cuda_lab 2>/dev/null | grep -c "Test *#")
  echo "gputests: $targets entries; building ($((SECONDS - start)) s)"
  # only the executables the gpu entries run (GPU_TEST_TARGETS), not the whole CPU suite
  # linac too: the interop entry runs it, and `checks` verifies with it (build-gpu/bin/linac is
  # linked to it when absent, so a later mode on the same warm machine reuses it)
  phase 420 ninja -C build-gpu-tests -j16 \
    ${GPU_TEST_TARGETS:-linac linac_layers_tests linac_model_tests linac_generate_tests linac_interop_tests linac_ops_tests} \
    >> "$OUT/gputests.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUT/gputests.log" | head -30; return 1; }
  echo "gputests: built ($((SECONDS - start)) s)"
  if [ ! -e "$L" ] && [ -x build-gpu-tests/bin/linac ]; then
    mkdir -p build-gpu/bin && ln -s "$PWD/build-gpu-tests/bin/linac" "$L"
  fi
}

gputests_run() {
  PYTHONPATH=.fla/site phase 300 ctest --test-dir build-gpu-tests -L gpu -E linac_cuda_lab ${GPU_TESTS:+-R "$GPU_TESTS"} \
    --output-on-failure >> "$OUT/gputests.log" 2>&1
  echo "gputests rc=$? ($((SECONDS - start)) s)"
  grep -E "Test +#|tests passed|tests failed|\*\*\*Failed" "$OUT/gputests.log" | tail -20
}

# gputests, then `linac verify --device cuda` with the same build. fla's forward kernels for the
# import-parity entry compile (Triton, default cache) beside the build, so that entry finds them.
checks() {
  PYTHONPATH=.fla/site timeout 400 python3 tests/runtime/interop/fla_real_reference.py /tmp/fla-real-warm \
    > "$WARM/fla_real_warm.log" 2>&1 &
  local warm_pid=$!
  gputests_build || return 1
  wait "$warm_pid"; echo "fla reference warm rc=$? ($((SECONDS - start)) s)"
  gputests_run
  verify_cuda
}

# bench/reproduce.sh (the small-scale study: the language-model and MQAR sweeps, then their table)
# with build-gpu's linac on the GPU; PART / LM_STEPS / ... pass through. The sweeps live in
# /tmp/linac-repro, so a later call on the same warm machine continues them (PART=mqar after
# PART=lm); the tables, both results.csv and the plots (tarred) come back.
reproduce() {
  build || exit 1
  DEVICE=cuda phase "${REPRO_LIMIT:-540}" bash bench/reproduce.sh /tmp/linac-repro "$PWD/$L" 2>&1 \
    | tee "$OUT/reproduce.log" | grep -E "^\[|^==|failed|error"
  echo "reproduce rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  python3 bench/reproduce_table.py /tmp/linac-repro > /dev/null 2>&1
  cp /tmp/linac-repro/table.md /tmp/linac-repro/table.json "$OUT/" 2>/dev/null
  for part in lm mqar; do cp "/tmp/linac-repro/$part/results.csv" "$OUT/results-$part.csv" 2>/dev/null; done
  local plots=(); for part in lm mqar; do [ -d "/tmp/linac-repro/$part/plots" ] && plots+=("$part/plots"); done
  [ ${#plots[@]} -gt 0 ] && tar -C /tmp/linac-repro -czf "$OUT/plots.tgz" "${plots[@]}"
  cat "$OUT/table.md" 2>/dev/null
}

# linac's Python package beside fla's ops on identical inputs (bench/fla_parity.py): the wheel's
# CMake project (python/, no pip there) built with its CUDA backend and Hopper stages, installed
# with python/linac beside it, then one JSON line per variant and tensor ($OUT/parity.jsonl) and
# a table of the worst rows. fla compiles its ops for the parity shape (PARITY_SHAPE) in the call.
parity() {
  local prefix=/tmp/linac-wheel warm=() v
  # the models of the 30-step comparison: fla's 340m widths (Gated DeltaNet's dk 256 x dv 512
  # heads), fewer layers and tokens, so fla's autotune fits the call (its whole 340m model did not
  # finish a step in 170 s from an empty cache)
  PARITY_MODEL_ARGS=${PARITY_MODEL_ARGS-"--layers 8 --batch 2 --seq-len 2048"}
  restore_cache
  # fla's ops autotune from an empty Triton cache for minutes (GLA alone took ~300 s in the first
  # parity call): one warm-up process per variant fills the cache while the package builds.
  for v in ${PARITY_VARIANTS-gla mamba2 retnet deltanet gated_deltanet rwkv6 gated_delta_diag hgrn}; do
    TRITON_CACHE_DIR=$MIN PYTHONPATH=.fla/site:bench phase 420 python3 bench/fla_parity.py --fla-warm --only "$v" \
      --shape "${PARITY_SHAPE:-2,1024,4,128}" >> "$WARM/parity_warm.log" 2>&1 &
    warm+=($!)
  done
  for v in ${PARITY_MODELS-gla gated_deltanet}; do  # the models' own Triton kernels (norms, loss, ...)
    TRITON_CACHE_DIR=$MIN PYTHONPATH=.fla/site phase 420 python3 bench/fla_model_bench.py --variant "$v" \
      $PARITY_MODEL_ARGS --warmup 1 --steps 0 --vocab 32000 --bypass-hopper-guard >> "$WARM/parity_warm.log" 2>&1 &
    warm+=($!)
  done
  { cmake -S python -B build-wheel -G Ninja -DSKBUILD_PROJECT_VERSION=0.1.0 -DLINAC_WHEEL_CUDA=ON \
      -DLINAC_CUTLASS_INCLUDE_DIR="$(bash bench/cutlass_include.sh)" -DCMAKE_INSTALL_PREFIX="$prefix" &&
    phase 420 cmake --build build-wheel -j16 && cmake --install build-wheel; } > "$OUT/parity.log" 2>&1 \
    || { grep -E "error|FAILED|Error" "$OUT/parity.log" | head -30; return 1; }
  cp python/linac/*.py "$prefix/linac/"
  echo "parity: package built ($((SECONDS - start)) s)"
  wait "${warm[@]}"
  echo "parity: fla warmed ($((SECONDS - start)) s)"; grep -h "fla_parity" "$WARM/parity_warm.log" | head -10
  [ -n "${PARITY_VARIANTS-x}" ] && TRITON_CACHE_DIR=$MIN PYTHONPATH="$prefix:.fla/site" phase 400 python3 bench/fla_parity.py \
    --shape "${PARITY_SHAPE:-2,1024,4,128}" > "$OUT/parity.jsonl" 2>> "$OUT/parity.log"
  echo "parity rc=$? ($((SECONDS - start)) s)"
  [ -s "$OUT/parity.jsonl" ] && python3 - "$OUT/parity.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{'variant':16} {'tensor':6} {'linac-ref':>10} {'fla-ref':>10} {'linac-fla':>10}  pass  fla error")
for r in rows:
    f = lambda k: f"{r[k]:10.2e}" if k in r else f"{'-':>10}"
    print(f"{r['variant']:16} {r['tensor']:6} {f('linac_vs_ref')} {f('fla_vs_ref')} {f('linac_vs_fla')}  "
          f"{'yes' if r['pass'] else 'NO ':4}  {r.get('fla_error', '')[:40]}")
PY
  # fla's hybrids (bench/fla_model_bench.py, PARITY_MODEL_ARGS), 30 steps from one seed with fla's kernels and
  # with linac's swapped in (bench/fla_swap.py; its CPU check first): the loss curves side by side.
  # Gated DeltaNet's fla backward runs only with the Hopper guard bypassed (wrong there, fla #640).
  PYTHONPATH="$prefix:.fla/site" python3 bench/fla_swap.py 2>&1 | grep "fla_swap check"
  for v in ${PARITY_MODELS-gla gated_deltanet}; do
    for kernels in fla linac; do
      TRITON_CACHE_DIR=$MIN PYTHONPATH="$prefix:.fla/site" phase 150 python3 bench/fla_model_bench.py --variant "$v" \
        $PARITY_MODEL_ARGS --kernels "$kernels" --warmup 0 --steps 30 --vocab 32000 --data zipf-copy --bypass-hopper-guard \
        >> "$OUT/parity-train.jsonl" 2>> "$OUT/parity.log"
      echo "parity train $v $kernels rc=$? ($((SECONDS - start)) s)"
    done
  done
  [ -s "$OUT/parity-train.jsonl" ] && python3 - "$OUT/parity-train.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for v in sorted({r["variant"] for r in rows}):
    by = {r["backend"]: r for r in rows if r["variant"] == v}
    a, b = by.get("fla-layers", {}).get("losses", []), by.get("fla-layers+linac-kernels", {}).get("losses", [])
    n = min(len(a), len(b))
    diff = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
    print(f"{v}: {n} steps; loss fla {a[:1]} -> {a[n - 1:n]}, linac {b[:1]} -> {b[n - 1:n]}; max |diff| {diff:.4f}"
          + "".join(f"; {k} error: {r['error'][:60]}" for k, r in by.items() if "error" in r))
PY
}

# At most 8 files come back from a device call ($OUT), 16 MiB each: when there are more, the logs
# and reports go into one bundle-<mode>.tgz (tar -xzf it here); the JSON lines and what is already
# compressed (prepare's triton-cache.tgz, KEEP_LAB's linac_cuda_lab.gz, earlier bundles) stay apart.
bundle_out() {
  local files
  files=$(find "$OUT" -maxdepth 1 -type f ! -name '*.jsonl' ! -name '*.tgz' ! -name '*.gz' ! -name '*.xz' -printf '%f\n')
  [ -n "$files" ] || return 0
  [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 8 ] || return 0
  tar -C "$OUT" -czf "$OUT/bundle-$MODE.tgz" $files && (cd "$OUT" && rm -f $files)
  echo "bundled $(echo "$files" | wc -l) files into $OUT/bundle-$MODE.tgz"
}
trap bundle_out EXIT

case "$MODE" in
  prepare) prepare ;;
  profile) profiled ;;
  fit) fit ;;
  ab) ab ;;
  lab) lab ;;
  time) timed ;;
  gputests) gputests ;;
  checks) checks ;;
  reproduce) reproduce ;;
  parity) parity ;;
  all) prepare; timed ;;  # one call when the device time left allows one machine start only
  *) echo "usage: bash bench/run_h200.sh prepare|time|all|lab|ab|profile|fit|gputests|checks|reproduce|parity [seconds]" >&2; exit 2 ;;
esac
