"""SIGTERM and Pool workers, run for real: a child ended by SIGTERM hands its records over and
still ends with SIGTERM's status; a program's own handler still runs (installed before or after
the capture started); a process that started with SIGTERM ignored is left alone; a Pool worker
hands over after each task and when ``with Pool`` terminates it. torch and CUPTI are the fakes
of conftest.py."""
from __future__ import annotations

import os
import signal
import site
import subprocess
import sys
import time

import pytest

from pytest_gpuutil.children.spool_format import EXITED, TERMINATED

from .conftest import child_env
from .helpers import read_spool

PTH = "pytest_gpuutil_children.pth"
pytestmark = pytest.mark.skipif(
    not any(os.path.exists(os.path.join(p, PTH)) for p in site.getsitepackages()),
    reason=f"{PTH} is not installed in site-packages (pip install -e . puts it there)")

WORK_THEN_WAIT = """
import os, signal, sys, time, torch
{before}
torch.cuda.work("_Zmatmul", 2_000_000)
torch.cuda.work("_Zadd", 1_000_000)
{after}
print("ready", flush=True)
time.sleep(60)
"""


def terminate(code: str, env: dict[str, str], **popen: object) -> tuple[int, str]:
    """Start ``code``, wait for its "ready", send SIGTERM; its exit status and its output."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    return proc.returncode, out + err


def test_sigterm_hands_over_and_the_exit_status_stays_sigterms(spool, fake_cupti) -> None:
    # the period is long: without the handler, SIGTERM would lose both kernels
    rc, _ = terminate(WORK_THEN_WAIT.format(before="", after=""), child_env(spool, fake_cupti, period=60))
    assert rc == -signal.SIGTERM
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"] and [e.reason for e in child.end] == [TERMINATED]
    assert child.memory  # the allocator's peaks came with the last hand-over


def test_a_shell_sees_143_as_without_the_plugin(spool, fake_cupti, tmp_path) -> None:
    script = tmp_path / "child.py"
    script.write_text(WORK_THEN_WAIT.format(before="", after=""))
    shell = (f'"{sys.executable}" "{script}" > "{tmp_path}/out" & pid=$!; '
             f'while ! grep -q ready "{tmp_path}/out" 2>/dev/null; do sleep 0.05; done; kill -TERM $pid; wait $pid; echo $?')
    out = subprocess.run(["sh", "-c", shell], env=child_env(spool, fake_cupti, period=60), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split()[-1] == "143", out
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"]


HANDLER = """
def handler(signum, frame):
    open(os.environ["MARK"], "w").write("handler ran")
    sys.exit(3)
"""


def test_a_handler_installed_before_the_capture_still_runs(spool, fake_cupti, tmp_path) -> None:
    mark = tmp_path / "mark"
    code = WORK_THEN_WAIT.format(before=HANDLER + "signal.signal(signal.SIGTERM, handler)", after="")
    rc, out = terminate(code, child_env(spool, fake_cupti, period=60, MARK=str(mark)))
    assert rc == 3 and mark.read_text() == "handler ran", out
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"] and [e.reason for e in child.end] == [EXITED]  # sys.exit: atexit


def test_a_handler_installed_after_the_capture_is_chained_and_shown_as_the_programs(spool, fake_cupti, tmp_path) -> None:
    mark = tmp_path / "mark"
    after = HANDLER + """
previous = signal.signal(signal.SIGTERM, handler)
assert previous is signal.SIG_DFL, previous
assert signal.getsignal(signal.SIGTERM) is handler
"""
    rc, out = terminate(WORK_THEN_WAIT.format(before="", after=after), child_env(spool, fake_cupti, period=60, MARK=str(mark)))
    assert rc == 3 and mark.read_text() == "handler ran", out
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"]


def test_a_handler_that_re_raises_the_default_still_hands_over(spool, fake_cupti) -> None:
    after = """
def handler(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, handler)
"""
    rc, out = terminate(WORK_THEN_WAIT.format(before="", after=after), child_env(spool, fake_cupti, period=60))
    assert rc == -signal.SIGTERM, out
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"]  # handed over before the program's handler ran


def test_no_handler_where_sigterm_was_not_default_at_start(spool, fake_cupti) -> None:
    after = """
from pytest_gpuutil.children import bootstrap
assert bootstrap.current() is not None and bootstrap._PROCESS.sigterm is None
assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
"""
    code = WORK_THEN_WAIT.format(before="", after=after).replace("time.sleep(60)", "time.sleep(0.5)")
    rc, out = terminate(code, child_env(spool, fake_cupti, period=60),
                        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    assert rc == 0, out  # SIGTERM ignored, as its parent arranged
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"] and [e.reason for e in child.end] == [EXITED]


def run_script(code: str, env: dict[str, str], folder, *args: str) -> None:
    """Run ``code`` from a file (a spawned child imports its ``__main__`` again: not possible with -c)."""
    script = folder / "main.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr


POOL = """
import multiprocessing as mp, os, torch

def work(i):
    torch.cuda.work(f"_Zk{i}", 500_000)
    return os.getpid()

if __name__ == "__main__":
    BODY
"""


def test_with_pool_workers_hand_over_before_terminate(spool, fake_cupti, tmp_path) -> None:
    body = """
    with mp.get_context("spawn").Pool(2) as pool:
        pids = pool.map(work, [0, 1], chunksize=1)
    """
    run_script(POOL.replace("BODY", body.strip()), child_env(spool, fake_cupti, period=60), tmp_path)
    files = read_spool(str(spool.directory))
    assert sorted(n for f in files for n in f.names()) == ["k0", "k1"]
    assert all(f.end for f in files)  # each ended by SIGTERM after handing over (or at exit)


def test_a_pool_worker_hands_over_after_each_task(spool, fake_cupti, tmp_path) -> None:
    # the worker is killed (no handler can run): what it did is there all the same
    body = """
    import signal, sys, time
    pool = mp.get_context("spawn").Pool(1)
    pid = pool.apply(work, (0,))
    started = sys.argv[1]
    pool.apply_async(mark_then_sleep, (started,))
    deadline = time.monotonic() + 120
    while not os.path.exists(started) and time.monotonic() < deadline:
        time.sleep(0.01)  # until it is in its next task: not holding the task queue's lock, which terminate() takes
    os.kill(pid, signal.SIGKILL)
    pool.terminate()
    """
    code = POOL.replace("BODY", body.strip()).replace("if __name__", """
def mark_then_sleep(path):
    import time
    open(path, "w").close()
    time.sleep(60)

if __name__""")
    run_script(code, child_env(spool, fake_cupti, period=60), tmp_path, str(tmp_path / "started"))
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["k0"] and child.end == []


def test_process_terminate_after_the_work(spool, fake_cupti, tmp_path) -> None:
    body = """
    import time
    ctx = mp.get_context("spawn")
    done = ctx.Event()
    p = ctx.Process(target=wait_after_work, args=(done,))
    p.start()
    assert done.wait(60)
    p.terminate()
    p.join(30)
    assert p.exitcode == -15, p.exitcode
    """
    code = POOL.replace("BODY", body.strip()).replace("if __name__", """
def wait_after_work(done):
    import time
    work(5)
    done.set()
    time.sleep(60)

if __name__""")
    run_script(code, child_env(spool, fake_cupti, period=60), tmp_path)
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["k5"] and [e.reason for e in child.end] == [TERMINATED]


def test_a_sigterm_during_the_processs_own_finish_waits_for_its_end_chunk(spool, fake_cupti) -> None:
    # a Pool worker that got its sentinel is finishing when its pool's terminate() sends SIGTERM:
    # here the signal comes from inside the finish itself (its settle step), at the same point
    code = """
import os, signal, torch
from pytest_gpuutil.children import bootstrap
torch.cuda.work("_Zmatmul", 2_000_000)
torch.cuda.work("_Zadd", 1_000_000)
bootstrap._PROCESS.capture.settle = lambda: os.kill(os.getpid(), signal.SIGTERM)
"""
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(spool, fake_cupti, period=60),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stderr  # the signal still ends the process
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["matmul", "add"] and [e.reason for e in child.end] == [EXITED]
