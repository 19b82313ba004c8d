#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: system packages (LLVM/MLIR 22, yaml-cpp, fmt,
# GoogleTest, ninja) and the LibTorch that the PyPI torch wheel carries. Safe to run repeatedly:
# each step is skipped when what it installs is already present.
set -euo pipefail

APT_PACKAGES=(
  cmake ninja-build g++ python3-pip
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libyaml-cpp-dev libfmt-dev libgtest-dev nlohmann-json3-dev libsentencepiece-dev
  libcli11-dev  # the `linac` command line (header-only)
  libgloo-dev  # headers c10d's ProcessGroupGloo includes (the torch wheel has Gloo built in)
)
TORCH_VERSION=2.11.0
SENTENCEPIECE_VERSION=0.2.2
TOKENIZERS_VERSION=0.22.2
SAFETENSORS_VERSION=0.8.0
SCIKIT_BUILD_CORE_VERSION=0.10.7

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! $PY -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION (LibTorch for the runtime)"
  $PY -m pip install -q "torch==$TORCH_VERSION"
fi
# matplotlib draws `linac sweep`'s plots (tools/sweep_plots.py).
if ! $PY -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib (linac sweep's plots)"
  $PY -m pip install -q matplotlib
fi
# tools/pretokenize.py: SentencePiece models and Hugging Face tokenizer.json files (Parquet input
# uses pyarrow only when it is installed); the pretokenize-roundtrip test needs sentencepiece.
if ! $PY -c "import sentencepiece, tokenizers" 2>/dev/null; then
  echo "setup: installing sentencepiece and tokenizers (tools/pretokenize.py)"
  $PY -m pip install -q "sentencepiece==$SENTENCEPIECE_VERSION" "tokenizers==$TOKENIZERS_VERSION"
fi
# safetensors (a 0.5 MB wheel) writes the fla-format checkpoints of the import tests
# (tests/runtime/interop/fla_reference.py) and reads linac export's output there.
if ! $PY -c "import safetensors" 2>/dev/null; then
  echo "setup: installing safetensors (linac import / export tests)"
  $PY -m pip install -q "safetensors==$SAFETENSORS_VERSION"
fi
# scikit-build-core builds the Python package (`pip install .`, pyproject.toml); the test of it
# (tests/python) installs without build isolation, so offline, with this one.
if ! $PY -c "import scikit_build_core" 2>/dev/null; then
  echo "setup: installing scikit-build-core (pip install . of the Python package)"
  $PY -m pip install -q "scikit-build-core==$SCIKIT_BUILD_CORE_VERSION"
fi
# lit and FileCheck drive the dialect tests; lit comes with llvm-22-tools, FileCheck too.
echo "setup: ok"
