"""What the command-line test scripts share: running the linac executable and checking its exit."""
import os
import subprocess

ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(binary, *args, expect=None, timeout=240):
    """Runs `binary args` to completion with ENV; checks its exit code when `expect` is given."""
    p = subprocess.run([binary, *args], env=ENV, capture_output=True, text=True, timeout=timeout)
    if expect is not None:
        assert p.returncode == expect, (f"linac {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                                        f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p
