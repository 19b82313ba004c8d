#!/usr/bin/env bash
# Prints the CuTe / CUTLASS 4.2 include directory the Hopper stages build with: an installed
# nvidia-cutlass (PyPI) if Python finds one, else the wheel carried in .deps/ (the GPU machine has
# no network), unpacked once into .deps/cutlass. Prints nothing when neither exists.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(python3 -c "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(os.path.dirname(s.origin), 'source', 'include') if s else '')" 2>/dev/null)
if [ -n "$dir" ] && [ -f "$dir/cute/tensor.hpp" ]; then echo "$dir"; exit 0; fi
whl=$(ls .deps/nvidia_cutlass-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || exit 0
inc=.deps/cutlass/cutlass_library/source/include
[ -f "$inc/cute/tensor.hpp" ] || python3 -m zipfile -e "$whl" .deps/cutlass >/dev/null
echo "$PWD/$inc"
