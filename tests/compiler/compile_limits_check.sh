#!/bin/sh
# `linac compile` on specs and schedules past the limits (specs/README.md, "Limits"): each gets one
# located `file:line:col: error:` line (`--schedule: error:` for the command line's), exit status 1
# and nothing written; never a crash, a hang or an internal error. A spec just under the limits
# compiles.
# usage: compile_limits_check.sh LINAC SPECS_DIR OUT_DIR
set -eu
linac=$1 specs=$2 out=$3
rm -rf "$out"
mkdir -p "$out"

# expect_error EXPECTED_STDERR ARGS...: `linac compile ARGS` fails with exactly that line.
expect_error() {
  expected=$1
  shift
  status=0
  "$linac" compile "$@" --out "$out/generated" > "$out/stdout" 2> "$out/stderr" || status=$?
  if [ "$status" -ne 1 ] || [ "$(cat "$out/stderr")" != "$expected" ] || [ -e "$out/generated" ]; then
    echo "linac compile $*: exit status $status; expected the error" >&2
    echo "  $expected" >&2
    echo "got:" >&2
    head -c 2000 "$out/stderr" >&2
    exit 1
  fi
}

# spec FILE DECAY [DEFINE_LINES_FILE]: a linear spec whose decay is DECAY (line 12, column 11
# without definitions).
spec() {
  {
    printf 'name: lim\nheads: 4\nkey_dim: 64\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n'
    printf '  a: {extent: head}\n'
    if [ $# -gt 2 ]; then printf 'define:\n'; cat "$3"; fi
    printf 'recurrence:\n  q: q\n  k: q\n  v: v\n  decay: "%s"\n' "$2"
  } > "$1"
}

# 13: a schedule out of range is the front end's error, as in `linac train`.
range='attention layer index 30 is out of range for a 24-layer model (valid: 0..23)'
expect_error "--schedule: error: $range" "$specs/gla.yaml" --schedule 3,30
expect_error "--schedule: error: $range" "$specs/gla.yaml" --schedule 3,30 --emit=ir
printf 'name: s\nattention_layers: [3, 30]\n' > "$out/schedule.yaml"
expect_error "$out/schedule.yaml:2:19: error: $range" "$specs/gla.yaml" --schedule "$out/schedule.yaml"
# `linac train` (in builds with the runtime) says the same.
tiny='--schedule: error: attention layer index 30 is out of range for a 4-layer model (valid: 0..3)'
expect_error "$tiny" "$specs/gla.yaml" --schedule 3,30 --preset tiny
if "$linac" train "$specs/gla.yaml" --schedule 3,30 --preset tiny --steps 1 --out "$out/run" > /dev/null \
  2> "$out/train.err"; then
  echo "linac train accepted --schedule 3,30" >&2
  exit 1
fi
if ! grep -q 'needs the runtime' "$out/train.err" && [ "$(tail -n 1 "$out/train.err")" != "$tiny" ]; then
  echo "linac train --schedule 3,30 said:" >&2
  cat "$out/train.err" >&2
  exit 1
fi

# 12: sizes out of range.
spec "$out/heads.yaml" "-exp(a)"
sed -i 's/^heads: 4$/heads: 9223372036854775807/' "$out/heads.yaml"
expect_error "$out/heads.yaml:2:8: error: field 'heads' must be between 1 and 1024, got 9223372036854775807" \
  "$out/heads.yaml"
spec "$out/conv.yaml" "-exp(a)"
sed -i 's/^  q: {extent: key}$/  q: {extent: key, conv: 1000000}/' "$out/conv.yaml"
expect_error "$out/conv.yaml:5:26: error: field 'conv' must be between 1 and 256, got 1000000" "$out/conv.yaml"

# 11: constants that fold to inf or nan, in the front end and, for a derivative, in the pipeline.
spec "$out/log0.yaml" "log(0)"
expect_error "$out/log0.yaml:12:11: error: 'log(0)' folds to -inf, which is not a finite float32 number" \
  "$out/log0.yaml"
spec "$out/div0.yaml" "-a / (1 - 1)"
expect_error "$out/div0.yaml:12:17: error: division by zero: the divisor '(1 - 1)' is the constant 0" \
  "$out/div0.yaml"
spec "$out/derivative.yaml" "-(a * 1e30) * 1e30"
expect_error "$out/derivative.yaml:12:11: error: the derivative of 'decay' folds to the constant -inf, which is \
not a finite float32 number" "$out/derivative.yaml"

# A constant decay folds to a finite constant and compiles (a fixed decay, no derivative).
spec "$out/constant.yaml" "log(0.5)"
"$linac" compile "$out/constant.yaml" --out "$out/constant" > /dev/null
grep -q 'const float t0 = -0.6931472f;' "$out/constant/lim/lim.h"
! grep -q 'decay_grad' "$out/constant/lim/lim.h"

# 10: a 32768-term sum, and a chain of 20000 definitions.
spec "$out/sum.yaml" "-($(awk 'BEGIN { s = "a"; for (i = 1; i < 32768; i++) s = s " + a"; print s }'))"
expect_error "$out/sum.yaml:12:20011: error: expression has more than 10000 nodes (numbers, names, operators and \
calls); that is the limit" "$out/sum.yaml"
awk 'BEGIN { print "  d0: \"a\""; for (i = 1; i < 20000; i++) printf "  d%d: \"d%d + 1\"\n", i, i - 1 }' \
  > "$out/chain.txt"
spec "$out/chain.yaml" "-exp(d19999)" "$out/chain.txt"
expect_error "$out/chain.yaml:265:3: error: definition 'd256' starts a chain of 257 definitions, each using the \
next (through 'd255'); chains are limited to 256" "$out/chain.yaml"

# Just under the limits: 4999 terms (9998 nodes) and a derivative of the same size compile.
spec "$out/big.yaml" "-($(awk 'BEGIN { s = "a"; for (i = 1; i < 4999; i++) s = s " + a"; print s }'))"
"$linac" compile "$out/big.yaml" --out "$out/generated" > /dev/null
grep -q 'LINAC_HD void decay_grad(float a, float\* d_a)' "$out/generated/lim/lim.h"
echo "compile_limits_check: ok"
