"""What the children's side reads of processes from /proc, on real processes."""
from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent("""
    import os, subprocess, sys
    from pytest_gpuutil.machine.processes import has_children
    before = has_children(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    during = has_children(os.getpid())
    child.kill()
    child.wait()
    after = has_children(os.getpid())
    print(before, during, after)
""")


def test_has_children_sees_a_child_process_only_while_it_lives() -> None:
    """The NVML sampler asks the driver nothing while the pytest process has no child process."""
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True", "False"]


def test_a_process_that_is_gone_reads_as_having_children() -> None:
    """What cannot be read counts as a child (the sampler then looks, as it did before)."""
    from pytest_gpuutil.machine.processes import has_children

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    assert has_children(int(done.stdout)) is True
