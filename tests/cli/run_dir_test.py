#!/usr/bin/env python3
"""`linac train` / `linac eval` and their run directories, end to end on the CPU with a tiny
Gated DeltaNet: what a researcher's shell, a scheduler and a full disk do to a run.

    run_dir_test.py LINAC SPECS_DIR WORK_DIR SCENARIO

One ctest entry per scenario (see SCENARIOS); each works in WORK_DIR/SCENARIO, which it empties
first. A scenario fails with an AssertionError that says what was expected.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import linac_cli

LINAC, SPECS, WORK = (os.path.abspath(p) for p in sys.argv[1:4])
SPEC = os.path.join(SPECS, "gated_deltanet.yaml")
# Small and fast: the tiny preset, 2 sequences of 32 tokens a step, 2 held-out batches.
SMALL = ["--preset", "tiny", "--batch", "2", "--seq-len", "32", "--device", "cpu", "--log-every", "1"]
FAST = SMALL + ["--eval-batches", "2"]
ENV = linac_cli.ENV


def linac(*args, expect=None, timeout=240):
    """Runs linac to completion; checks its exit code when `expect` is given."""
    return linac_cli.run(LINAC, *args, expect=expect, timeout=timeout)


def train(out, *args, spec=SPEC, expect=0, timeout=240):
    return linac("train", *([spec] if spec else []), *FAST, "--out", out, *args, expect=expect, timeout=timeout)


def snapshot(path):
    """Every file under `path`, relative name -> bytes (the lock file aside: it holds a PID)."""
    files = {}
    for root, _, names in os.walk(path):
        for n in names:
            full = os.path.join(root, n)
            if os.path.relpath(full, path) != "lock":
                with open(full, "rb") as f:
                    files[os.path.relpath(full, path)] = f.read()
    return files


def checkpoints(out):
    return sorted(n for n in os.listdir(out) if re.fullmatch(r"ckpt-\d+\.pt", n))


def latest(out):
    with open(os.path.join(out, "latest")) as f:
        return f.read().strip()


def damage(path):
    """Flips bytes in the middle of a file: inside a tensor, for a checkpoint."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        chunk = f.read(16)
        f.seek(os.path.getsize(path) // 2)
        f.write(bytes(b ^ 0x5A for b in chunk))


def metric_steps(out):
    import json
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if '"loss"' in line]


def check_in(needle, text, what="output"):
    assert needle in text, f"expected {needle!r} in the {what}:\n{text}"


# ----- the scenarios -------------------------------------------------------------------------

def fresh_run_refuses_existing_dir(work):
    """Item 1: a plain re-run into a run directory is refused and changes nothing; --overwrite
    replaces the run (no old checkpoint or evaluation survives, latest is the new one)."""
    out = os.path.join(work, "run")
    train(out, "--steps", "4", "--checkpoint-every", "1")
    before = snapshot(out)
    p = train(out, "--steps", "2", expect=2)
    for needle in (out, "--resume", "--overwrite"):
        check_in(needle, p.stderr, "refusal")
    assert snapshot(out) == before, "a refused run changed the run directory"
    linac("eval", out, "--tasks", "mqar", "--mqar-pairs", "2", "--device", "cpu", expect=0)  # writes eval.jsonl
    train(out, "--steps", "2", "--checkpoint-every", "1", "--overwrite")
    assert checkpoints(out) == ["ckpt-1.pt", "ckpt-2.pt"], checkpoints(out)
    assert not os.path.exists(os.path.join(out, "eval.jsonl")), "the replaced run's results survived"
    assert latest(out) == "ckpt-2.pt"
    assert metric_steps(out) == [1, 2], metric_steps(out)
    linac("train", SPEC, "--resume", "--overwrite", "--out", out, expect=2)


def corrupt_checkpoint_falls_back(work):
    """Item 2: flipped bytes in the latest checkpoint are detected; eval and resume fall back to
    the previous one saying so; a named damaged checkpoint and a run with none intact fail."""
    out = os.path.join(work, "run")
    train(out, "--steps", "4", "--checkpoint-every", "2")
    damage(os.path.join(out, "ckpt-4.pt"))
    p = linac("eval", out, "--tasks", "mqar", "--mqar-pairs", "2", "--device", "cpu", expect=0)
    check_in("ckpt-4.pt is damaged: checksum mismatch", p.stderr)
    check_in(f"falling back to {out}/ckpt-2.pt", p.stderr)
    check_in("step 2,", p.stdout)
    p = linac("eval", os.path.join(out, "ckpt-4.pt"), "--tasks", "mqar", "--device", "cpu", expect=1)
    check_in("checksum mismatch", p.stderr)
    p = train(out, "--steps", "6", "--resume", spec=None)
    check_in("falling back to", p.stderr)
    check_in("resumed from step 2", p.stdout)
    for name in checkpoints(out):
        damage(os.path.join(out, name))
    p = train(out, "--steps", "8", "--resume", spec=None, expect=1)
    check_in(f"no intact checkpoint in {out}:", p.stderr)


def resume_checks_before_touching(work):
    """Items 3 and 4: a resume with another model or optimization is refused, listing what
    differs, before anything in the run directory changes; safe changes are noted; resume and
    eval build from the run's copies, so moving the original spec changes nothing, and editing
    a copy is an error."""
    spec = os.path.join(work, "my_gdn.yaml")
    shutil.copy(SPEC, spec)
    narrow = os.path.join(work, "narrow.yaml")
    with open(os.path.join(SPECS, "presets", "tiny.yaml")) as f:
        text = f.read()
    with open(narrow, "w") as f:
        f.write(text.replace("name: tiny", "name: narrow").replace("hidden: 128", "hidden: 64"))
    out = os.path.join(work, "run")
    train(out, "--steps", "4", spec=spec)
    with open(os.path.join(out, "model.json")) as f:
        check_in('"sha256"', f.read(), "model.json")
    assert os.path.exists(os.path.join(out, "inputs", "spec.yaml"))
    before = snapshot(out)

    p = train(out, "--steps", "6", "--resume", "--preset", narrow, spec=spec, expect=2)
    check_in("model.json: preset.hidden is 128 in the run, 64 now", p.stderr)
    check_in("model.json: preset.name is tiny in the run, narrow now", p.stderr)
    p = train(out, "--steps", "6", "--resume", "--lr", "1e-3", spec=spec, expect=2)
    check_in("lr is 0.002 in the run, 0.001 now (changes the training: --accept-changes allows it)", p.stderr)
    p = train(out, "--steps", "6", "--resume", "--batch", "4", spec=spec, expect=2)
    check_in("batch is 2 in the run, 4 now", p.stderr)
    with open(spec, "a") as f:
        f.write("# edited after the run started\n")
    p = train(out, "--steps", "6", "--resume", spec=spec, expect=2)
    check_in("model.json: spec.sha256 is ", p.stderr)
    assert snapshot(out) == before, "a refused resume changed the run directory"

    os.rename(spec, spec + ".moved")  # the original is gone: the run's copy is what counts
    p = train(out, "--steps", "6", "--resume", spec=None)
    check_in("note: steps is 4 in the run, 6 now", p.stderr)
    check_in("resumed from step 4", p.stdout)
    linac("eval", out, "--tasks", "ppl", "--device", "cpu", expect=0)
    p = train(out, "--steps", "7", "--resume", "--lr", "1e-3", "--accept-changes", spec=None)
    check_in("note: lr is 0.002 in the run, 0.001 now (--accept-changes)", p.stderr)

    with open(os.path.join(out, "inputs", "spec.yaml"), "a") as f:
        f.write("# edited copy\n")
    p = linac("eval", out, "--tasks", "ppl", "--device", "cpu", expect=1)
    check_in("inputs/spec.yaml was changed after the run started", p.stderr)


def start_long_run(out):
    """A run long enough to be stopped, once it has trained its first step."""
    p = subprocess.Popen([LINAC, "train", SPEC, *FAST, "--steps", "100000", "--checkpoint-every", "0",
                          "--eval-every", "0", "--out", out], env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("step 1/"):
            return p, lines
    p.wait()
    raise AssertionError("the run ended before its first step:\n" + "".join(lines) + p.stderr.read())


def lock_and_signals(work):
    """Items 5 and 6: a second run on a locked --out is refused naming the holder's PID;
    SIGTERM / SIGHUP / SIGINT checkpoint and exit 143 / 129 / 130 without the end-of-run
    evaluation; after kill -9 the lock is free and the run resumes."""
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)):
        out = os.path.join(work, f"run-{sig.name}")
        p, lines = start_long_run(out)
        try:
            if sig == signal.SIGTERM:
                second = train(out, "--steps", "100000", "--resume", expect=1, timeout=60)
                check_in(f"is in use by another linac process (pid {p.pid})", second.stderr)
            p.send_signal(sig)
            stdout, stderr = p.communicate(timeout=120)
        finally:
            p.kill()  # a no-op once it has exited
            p.wait()
        stdout = "".join(lines) + stdout
        assert p.returncode == code, f"{sig.name}: exit {p.returncode}, expected {code}\n{stdout}\n{stderr}"
        match = re.search(rf"stopped at step (\d+) by {sig.name}; checkpoint {re.escape(out)}/ckpt-(\d+)\.pt", stdout)
        assert match and match.group(1) == match.group(2), stdout
        assert latest(out) == f"ckpt-{match.group(1)}.pt"
        for absent in ("held-out:", "mqar:", "eval step"):
            assert absent not in stdout, f"{sig.name}: an interrupted run evaluated ({absent})\n{stdout}"
    out = os.path.join(work, "run-SIGTERM")
    step = int(latest(out)[5:-3])
    p = train(out, "--steps", str(step + 2), "--resume", spec=None)
    check_in(f"resumed from step {step}", p.stdout)

    out = os.path.join(work, "run-kill9")
    p = subprocess.Popen([LINAC, "train", SPEC, *FAST, "--steps", "100000", "--checkpoint-every", "2",
                          "--out", out], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in p.stdout:
            if line.startswith("step 5/"):
                break
    finally:
        p.kill()  # kill -9
        p.wait()
    p = train(out, "--steps", "8", "--resume", spec=None)
    assert re.search(r"resumed from step [2-9]", p.stdout), p.stdout


def mount_tmpfs(mountpoint, size):
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mountpoint], check=True)


def disk_full(work):
    """Item 8 (and 7): on a full disk the failed checkpoint's partial file is removed, the error
    says "no space left on device" with the path, the last good checkpoint stays usable, and a
    resume on a full disk leaves metrics.jsonl and config.json whole. On a small tmpfs in a
    private mount namespace (unshare -m as root, unshare -rm otherwise); where neither works,
    under RLIMIT_FSIZE instead, whose EFBIG takes the same path ("file size limit exceeded")."""
    if os.environ.get("LINAC_IN_MOUNT_NS") != "1" and os.environ.get("LINAC_NO_TMPFS") != "1":
        unshare = shutil.which("unshare")
        if unshare:
            cmd = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-rm"]
            probe = subprocess.run(cmd + ["sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {work}"],
                                   capture_output=True)
            if probe.returncode == 0:
                env = dict(os.environ, LINAC_IN_MOUNT_NS="1")
                rc = subprocess.run(cmd + [sys.executable, *sys.argv], env=env).returncode
                if rc != 0:
                    raise AssertionError(f"disk_full in a mount namespace failed (exit {rc})")
                return
        print("note: no tmpfs (mount in a private namespace failed): testing under RLIMIT_FSIZE")
        os.environ["LINAC_NO_TMPFS"] = "1"

    sizing = os.path.join(work, "sizing")
    train(sizing, "--steps", "1")
    ckpt = os.path.getsize(os.path.join(sizing, "ckpt-1.pt"))
    on_tmpfs = os.environ.get("LINAC_IN_MOUNT_NS") == "1"
    disk = os.path.join(work, "disk")
    os.makedirs(disk)
    out = os.path.join(disk, "run")
    if on_tmpfs:  # room for two checkpoints and a half (plus the small files), not three
        print(f"disk_full: on a tmpfs of {ckpt * 5 // 2 + 256 * 1024} bytes")
        mount_tmpfs(disk, ckpt * 5 // 2 + 256 * 1024)
        p = train(out, "--steps", "3", "--checkpoint-every", "1", expect=1)
        check_in(f"no space left on device writing {out}/ckpt-3.pt.tmp (the partial file was removed); "
                 f"the last good checkpoint is {out}/ckpt-2.pt", p.stderr)
    else:
        print(f"disk_full: under RLIMIT_FSIZE {ckpt // 2} (EFBIG)")

        def limit():
            import resource
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (ckpt // 2, ckpt // 2))
        train(out, "--steps", "2", "--checkpoint-every", "1")
        p = subprocess.run([LINAC, "train", *FAST, "--out", out, "--resume", "--steps", "3"], env=ENV,
                           capture_output=True, text=True, preexec_fn=limit)
        assert p.returncode == 1, p.stderr
        check_in(f"file size limit exceeded writing {out}/ckpt-3.pt.tmp (the partial file was removed); "
                 f"the last good checkpoint is {out}/ckpt-2.pt", p.stderr)
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")], os.listdir(out)
    assert latest(out) == "ckpt-2.pt"
    p = linac("eval", out, "--tasks", "mqar", "--mqar-pairs", "2", "--device", "cpu", expect=0)
    check_in("step 2,", p.stdout)
    if not on_tmpfs:
        return

    # The disk full to the last byte: a resume fails writing, and the files it would replace stay whole.
    before = snapshot(out)
    fd = os.open(os.path.join(disk, "filler"), os.O_WRONLY | os.O_CREAT)
    for chunk in (65536, 4096, 1):  # to the last page
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError:
            pass
    os.close(fd)
    p = train(out, "--steps", "4", "--resume", spec=None, expect=1)
    check_in("no space left on device writing", p.stderr)
    after = snapshot(out)
    for name in ("metrics.jsonl", "config.json", "model.json", "latest"):
        assert after.get(name) == before[name], f"{name} changed by a resume on a full disk"
    os.remove(os.path.join(disk, "filler"))
    subprocess.run(["mount", "-o", f"remount,size={ckpt * 6}", disk], check=True)
    p = train(out, "--steps", "4", "--resume", spec=None)
    check_in("resumed from step 2", p.stdout)
    subprocess.run(["umount", disk], check=True)


def final_eval_after_checkpoint(work):
    """Item 9: the final checkpoint is written before the end-of-run evaluation, which is
    bounded by --eval-batches and says so."""
    out = os.path.join(work, "run")
    p = linac("train", SPEC, *SMALL, "--out", out, "--steps", "2", "--eval-batches", "1", expect=0)
    lines = p.stdout.splitlines()
    ckpt = next(i for i, line in enumerate(lines) if line == f"checkpoint {out}/ckpt-2.pt")
    evaluation = next(i for i, line in enumerate(lines) if line.startswith("eval step 2 |"))
    assert ckpt < evaluation, p.stdout
    check_in("over 64 tokens (1 batches; --eval-batches 0 for all)", p.stdout)


def deterministic_runs_repeat(work):
    """`--deterministic`: two runs from the same seed log the same training losses, gradient norms
    and held-out losses (the weights after each step) to the last bit; config.yaml records the
    flag."""
    import json
    timing = ("tokens_per_s", "elapsed")

    def run(name):
        out = os.path.join(work, name)
        train(out, "--steps", "3", "--deterministic", "--seed", "7", "--eval-every", "1")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            rows = [{k: v for k, v in json.loads(line).items() if k not in timing} for line in f]
        with open(os.path.join(out, "config.yaml")) as f:
            check_in("deterministic: true", f.read(), "config.yaml")
        return rows

    first, second = run("a"), run("b")
    assert first == second, f"two deterministic runs differ:\n{first}\n{second}"
    assert sum("eval_loss" in r for r in first) == 3 and sum("grad_norm" in r for r in first) == 3, first


SCENARIOS = {f.__name__: f for f in (fresh_run_refuses_existing_dir, corrupt_checkpoint_falls_back,
                                     resume_checks_before_touching, lock_and_signals, disk_full,
                                     final_eval_after_checkpoint, deterministic_runs_repeat)}

if __name__ == "__main__":
    name = sys.argv[4]
    work = os.path.join(WORK, name)
    if os.environ.get("LINAC_IN_MOUNT_NS") != "1":
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    start = time.time()
    SCENARIOS[name](work)
    print(f"{name}: passed in {time.time() - start:.1f} s")
