# lit configuration for the linac dialect tests. Tests call `linac-opt`,
# `FileCheck` and `not` from PATH: the build tree's bin/ and LLVM's bin/.
import os

import lit.formats

config.name = "linac-dialect"
config.test_format = lit.formats.ShTest(not lit_config.isWindows)
config.suffixes = [".mlir"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = getattr(config, "linac_test_exec_root", config.test_source_root)

path = [config.linac_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))]
config.environment["PATH"] = os.pathsep.join(path)
