"""linac.compile: a spec's kernels, compiled and built on demand, as a module of fla-style ops.

The road is `linac emit`'s: the `linac` compiler (built with MLIR) writes the spec's package, CMake
builds it with its PyTorch modules, and the package is imported from the cache. A build is cached
by the spec's text, the compiler's `linac --version` and the backends, so a second call (or a
second process) imports it without building.
"""
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

# Variants this process registered through linac.compile: name -> (spec sha256, ops module).
# torch.library cannot redefine an op, so a name is bound to one version of its spec per process.
_compiled = {}


def _say(verbose, message):
    if verbose:
        print(f"linac.compile: {message}", file=sys.stderr, flush=True)


def _run(command, what):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-40:])
        raise RuntimeError(f"linac.compile: {what} failed (exit {result.returncode}): "
                           f"{' '.join(map(str, command))}\n{tail}")
    return result.stdout


def _executable(given):
    path = given or os.environ.get("LINAC_EXECUTABLE") or shutil.which("linac")
    if not path:
        raise FileNotFoundError(
            "linac.compile needs the `linac` compiler (a linac build with MLIR): put it on PATH, "
            "set LINAC_EXECUTABLE or pass linac_executable=")
    return path


def _cache_root(given):
    if given:
        return Path(given)
    if os.environ.get("LINAC_CACHE_DIR"):
        return Path(os.environ["LINAC_CACHE_DIR"]) / "python"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "linac" / "python"


def _backends(given):
    if given is None:
        return "cpu,cuda" if torch.cuda.is_available() else "cpu"
    items = [item.strip() for item in given.split(",") if item.strip()]
    unknown = [item for item in items if item not in ("cpu", "cuda")]
    if unknown or not items:
        raise ValueError(f"backends takes a comma-separated list of cpu and cuda, got {given!r}")
    return ",".join(sorted(set(items) | {"cpu"}))


def _emit(linac, spec, backends, work, verbose):
    _say(verbose, f"emitting {spec} ({backends})")
    _run([linac, "emit", str(spec), "--out", str(work / "src"), "--backends", backends], "linac emit")


def _build(work, folder, verbose):
    """Builds the package emitted into `work` (a temporary folder beside `folder`) and renames
    `work` to `folder`."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise FileNotFoundError("linac.compile needs CMake (>= 3.24) on PATH: pip install cmake")
    started = time.monotonic()
    configure = [cmake, "-S", str(work / "src"), "-B", str(work / "build"), "-DCMAKE_BUILD_TYPE=Release",
                 "-DLINAC_KERNELS_PYTHON=ON", "-DLINAC_KERNELS_PYTHON_DIR=python",
                 f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    _say(verbose, f"building in {work}")
    _run(configure, "configuring the package (cmake)")
    _run([cmake, "--build", str(work / "build"), "--parallel", str(os.cpu_count() or 1)],
         "building the package (cmake --build)")
    _run([cmake, "--install", str(work / "build"), "--prefix", str(work / "prefix")],
         "installing the package (cmake --install)")
    shutil.rmtree(work / "build")  # its paths name the temporary folder
    try:
        os.rename(work, folder)
    except OSError:
        if not (folder / "prefix").is_dir():  # not another process's finished build
            raise
    _say(verbose, f"built {folder} in {time.monotonic() - started:.0f} s")


def _manifest(src):
    manifests = sorted((src / "generated").glob("*/manifest.json"))
    if len(manifests) != 1:
        raise RuntimeError(f"linac.compile: {src} holds {len(manifests)} variants, expected 1; delete it")
    manifest = json.loads(manifests[0].read_text())
    return manifest["name"], manifest["sha256"]


def _installed_variants():
    """SPEC_SHA256 of this installation's linac.ops, or {} where its kernels are not built."""
    try:
        ops = importlib.import_module(".ops", __package__)
    except ImportError:
        return {}, None
    return ops.SPEC_SHA256, ops


def _import(package, module_name):
    spec = importlib.util.spec_from_file_location(module_name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module.ops


def compile(spec, *, backends=None, linac_executable=None, cache_dir=None, verbose=True):  # noqa: A001
    """Compiles the linear-attention variant `spec` (a YAML file) and returns a module with its
    fla-style op, chunk_<variant> (as in linac.ops), and SPEC_SHA256.

    backends: "cpu" or "cpu,cuda" (default: cuda too when torch sees a GPU); linac_executable: the
    compiler (default: $LINAC_EXECUTABLE, else `linac` on PATH); cache_dir: where builds are kept
    (default: $LINAC_CACHE_DIR/python, else ~/.cache/linac/python). A variant already in linac.ops
    at the same version of its spec is returned from there without building. One name stands for
    one version of its spec per process (torch.library ops cannot be redefined): to compare two
    versions of a spec side by side, give them different names.
    """
    spec = Path(spec).resolve()
    text = spec.read_bytes()
    linac = _executable(linac_executable)
    backends = _backends(backends)
    compiler = _run([linac, "--version"], "linac --version").strip()
    key = hashlib.sha256(b"\0".join([compiler.encode(), backends.encode(), text])).hexdigest()[:16]
    folder = _cache_root(cache_dir) / f"{spec.stem}-{key}"
    installed, installed_ops = _installed_variants()
    work = None
    try:
        if not (folder / "prefix").is_dir():
            folder.parent.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
            _emit(linac, spec, backends, work, verbose)
        name, sha = _manifest((work or folder) / "src")
        if name in installed:
            if installed[name] == sha:
                _say(verbose, f"{name} is in linac.ops at this version of {spec.name}")
                return installed_ops
            raise ValueError(f"{spec}: a variant named '{name}' is in linac.ops, compiled from another "
                             "version of its spec; give this version another name (the spec's `name:`)")
        if name in _compiled and _compiled[name][0] != sha:
            raise ValueError(f"{spec}: linac.compile registered a variant named '{name}' from another "
                             "version of its spec in this process; give this version another name "
                             "(the spec's `name:`)")
        if work:
            _build(work, folder, verbose)
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    if name not in _compiled:
        ops = _import(folder / "prefix" / "python" / "linac_kernels", f"_linac_compiled_{name}_{key}")
        _compiled[name] = (sha, ops)
    return _compiled[name][1]
