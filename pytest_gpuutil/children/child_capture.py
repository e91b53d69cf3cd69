"""A measured child's side: its event source's records go to its spool file, periodically and at exit.

The source is the same :class:`~pytest_gpuutil.capture.cupti.CuptiSource` the parent uses (or
any object with its methods). A daemon thread hands over what was collected every period, and at
once when the parent pokes the spool; the exit handlers hand over the rest, the allocator's peaks
and an END chunk. SIGTERM (``Pool.__exit__``, ``Process.terminate()``, torchrun stopping its ranks)
is handed over by the bootstrap's handler (:mod:`~pytest_gpuutil.children.bootstrap`), and a
``multiprocessing.Pool`` worker hands over after each task (:meth:`ChildCapture.hand_over_now`).
A child killed with SIGKILL loses its last period, and what CUPTI still held (see below).

While the child runs, hand-overs take only what CUPTI holds complete (its default flush): a forced
flush returns the records of kernels still running without their times, and those are lost (on an
H100, 31 of 40 matmuls of one of two spawned children, and 34 of 42 records of a CUDA program, went
that way). CUPTI calls a buffer complete only once it is full, so a child's periodic hand-overs may
bring little; the forced flush is safe where nothing of the process runs: at exit, and right after
the process waited for its GPU (``torch.cuda.synchronize`` on the one device it uses: the end of a
burst), at most every :data:`SYNC_HAND_OVER_GAP_S` (:meth:`ChildCapture.after_synchronize`). A
child SIGKILLed after it synchronized keeps what it did up to then.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pytest_gpuutil.children.spool import append, child_file, open_for_append, poke_time
from pytest_gpuutil.children.spool_format import (
    EXITED,
    NESTED,
    PYTHON,
    REALTIME,
    End,
    Header,
    Memory,
    Note,
    encode_end,
    encode_events,
    encode_header,
    encode_memory,
    encode_note,
)
from pytest_gpuutil.machine.processes import command_line, describe, find_rank, proc_start, short_command

#: how often the hand-over thread looks at the poke file (seconds)
POLL_S = 0.05
#: the forced hand-over after a synchronize comes at most this often (seconds): a loop that
#: synchronizes every step pays for it at most 20 times a second
SYNC_HAND_OVER_GAP_S = 0.05


@dataclass(frozen=True)
class ChildIdentity:
    """Who a child is, as its header says."""

    program: str
    command: str
    rank: str
    local_rank: str
    visible_devices: Optional[str]
    flags: int = 0

    @classmethod
    def of_this_process(cls, forked: bool = False, flags: int = 0) -> "ChildIdentity":
        argv = command_line()
        rank, local_rank = find_rank(dict(os.environ))
        return cls(describe(argv, forked), short_command(argv), rank, local_rank,
                   os.environ.get("CUDA_VISIBLE_DEVICES"), flags)


class ChildCapture:
    """One process's records, handed to the parent through the spool (see the module docstring)."""

    def __init__(self, directory: str, source: Any, identity: ChildIdentity, period_s: float,
                 memory: Optional[Callable[[], Memory]] = None, capture: int = PYTHON, clock: int = REALTIME,
                 library: str = "", profiler_active: Callable[[], bool] = lambda: False,
                 settle: Optional[Callable[[], None]] = None):
        self.directory = directory
        self.source = source
        self.identity = identity
        self.period_s = period_s
        self.memory = memory
        self.capture = capture
        self.clock = clock
        self.library = library
        self.profiler_active = profiler_active
        #: waits for the process's GPU work before the last (forced) flush
        self.settle = settle
        self.path = ""
        self.finished = False
        self._finishing = False
        self.paused = False
        #: time.monotonic() of the last hand-over (a Pool worker's per-task hand-over is bounded by it)
        self.last_hand_over = 0.0
        #: time.monotonic() of the last forced hand-over while running (after a synchronize, between Pool tasks)
        self.last_forced = 0.0
        self._fd = -1
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._poked = 0
        self._pid = os.getpid()

    # -- life ---------------------------------------------------------------------------------------
    def open(self, startup_ns: int, created_ns: Optional[int] = None) -> None:
        """Create the spool file and write the header (the source already runs)."""
        created = self.source.now() if created_ns is None else created_ns
        self.path = child_file(self.directory, self._pid, created)
        self._fd = open_for_append(self.path)
        ident = self.identity
        header = Header(self._pid, os.getppid(), proc_start(self._pid), created, startup_ns, self.clock,
                        self.capture, ident.flags, ident.program, ident.command, ident.rank, ident.local_rank,
                        ident.visible_devices, self.library)
        self._write(encode_header(header))

    def run_in_background(self) -> None:
        self._poked = poke_time(self.directory)
        self._thread = threading.Thread(target=self._loop, name="pytest-gpuutil child hand-over", daemon=True)
        self._thread.start()

    def note(self, text: str) -> None:
        with self._lock:
            self._write(encode_note(Note(self._now(), text)))

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(POLL_S):
            if self._pid != os.getpid():
                return
            poked = poke_time(self.directory)
            asked = poked != self._poked
            if asked or time.monotonic() - last >= self.period_s:
                self._poked = poked
                self.hand_over(force=asked, running=True)
                last = time.monotonic()
            if self.paused and not self.profiler_active():
                self._resume()

    def hand_over(self, force: bool = False, running: bool = False) -> None:
        """Write what was collected since the last hand-over (an empty chunk when forced); while the
        process ``running``, only what CUPTI holds complete (see the module docstring)."""
        with self._lock:
            if self.finished or self._fd < 0:
                return
            covered = self._now()
            drain = getattr(self.source, "drain_completed", None) if running else None
            try:
                columns, dropped = (drain or self.source.drain)()
            except Exception as exc:  # noqa: BLE001 - a child must never fail because of its measurement
                self._write(encode_note(Note(covered, f"its records could not be read: {exc}")))
                return
            if len(columns) or dropped or force:
                self._write(encode_events(columns, covered, dropped))
            self.last_hand_over = time.monotonic()

    def hand_over_now(self) -> None:
        """Everything so far, on the caller's thread: wait for this process's GPU work, then the
        forced flush (safe once nothing runs). For the main thread between a Pool worker's tasks
        and a program's own SIGTERM handler; the capture goes on."""
        with self._lock:
            if self.finished or self._finishing or self.paused or self._pid != os.getpid():
                return
            if self.settle is not None:
                try:
                    self.settle()
                except Exception:  # noqa: BLE001 - a broken context: hand over what there is
                    pass
            self.hand_over()
            self.last_forced = time.monotonic()

    def after_synchronize(self, idle: Callable[[], bool]) -> bool:
        """The process has just waited for its GPU work: everything so far, with the forced flush, if
        ``idle()`` says nothing of this process can still run (one device used) and the last forced
        hand-over was at least :data:`SYNC_HAND_OVER_GAP_S` ago. Whether it handed over."""
        if time.monotonic() - self.last_forced < SYNC_HAND_OVER_GAP_S:
            return False
        with self._lock:
            if self.finished or self._finishing or self.paused or self._pid != os.getpid() or not idle():
                return False
            self.hand_over()
            self.last_forced = time.monotonic()
            return True

    @property
    def finish_interrupted(self) -> bool:
        """A finish began and has not ended: seen from a signal handler, the main thread's own
        finish was interrupted (a finish on another thread holds the lock until it ends)."""
        return self._finishing and not self.finished

    def finish(self, reason: int = EXITED, note: str = "", stop_source: bool = True) -> None:
        """The last hand-over: the rest of the records, the allocator's peaks, the END chunk."""
        with self._lock:
            if self.finished or self._finishing or self._pid != os.getpid():
                return  # _finishing: a SIGTERM handler that interrupted this very finish
            self._finishing = True
            if self.settle is not None:
                try:
                    self.settle()
                except Exception:  # noqa: BLE001 - a broken context: hand over what there is
                    pass
            self.hand_over(force=True)
            if self.memory is not None:
                try:
                    memory = self.memory()
                except Exception:  # noqa: BLE001
                    memory = None
                if memory is not None and memory.devices:
                    self._write(encode_memory(memory))
            self._write(encode_end(End(self._now(), reason, note)))
            self.finished = True
            self._stop.set()
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        if stop_source:
            try:
                self.source.stop()
            except Exception:  # noqa: BLE001
                pass

    def hand_over_to_nested(self) -> Any:
        """A pytest --gpu-util run in this process measures it from now on: finish, keep the source running."""
        self.finish(NESTED, stop_source=False)
        return self.source

    def abandon(self) -> None:
        """In a forked child: this capture is the parent's; forget it without writing."""
        self.finished = True
        self._stop.set()
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1

    # -- another profiler in the child --------------------------------------------------------------
    def before_profiler(self) -> None:
        """The child starts its own torch.profiler: hand over, step aside until it ends."""
        with self._lock:
            if self.finished or self.paused:
                return
            self.hand_over(force=True)
            try:
                self.source.stop()
            except Exception:  # noqa: BLE001
                pass
            self.paused = True
            self._write(encode_note(Note(self._now(), "its own torch.profiler session took over CUPTI: "
                                                      "its GPU work is not measured until that session ends")))

    def _resume(self) -> None:
        with self._lock:
            if self.finished or not self.paused:
                return
            try:
                self.source.start()
            except Exception as exc:  # noqa: BLE001
                self._write(encode_note(Note(self._now(), f"could not measure again after its torch.profiler session: {exc}")))
                self.finished = True
                return
            self.paused = False
            self._write(encode_note(Note(self._now(), "measured again after its torch.profiler session")))

    # -- internals ----------------------------------------------------------------------------------
    def _now(self) -> int:
        try:
            return int(self.source.now())
        except Exception:  # noqa: BLE001
            return time.time_ns()

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            return
        try:
            append(self._fd, data)
        except OSError:  # the spool is gone (the parent ended): stop quietly
            self.abandon()


def torch_synchronize(torch: Any) -> None:
    """Wait for this process's work on every device it used (its records are then complete)."""
    synchronize = getattr(torch.cuda.synchronize, "__wrapped__", torch.cuda.synchronize)  # torch's own
    for device in torch_devices_used(torch):  # only devices it used: another one would get a context
        synchronize(device)


def torch_devices_used(torch: Any) -> list[int]:
    """The devices on which this process has a CUDA context (or allocated memory)."""
    cuda = torch.cuda
    if not cuda.is_initialized():
        return []
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    return [d for d in range(cuda.device_count())
            if (has_context(d) if has_context is not None else cuda.max_memory_reserved(d) > 0)]


def torch_memory(torch: Any) -> Memory:
    """The allocator's peaks on every device this process used."""
    cuda = torch.cuda
    if not cuda.is_initialized():
        return Memory(())
    found = []
    for device in range(cuda.device_count()):
        peak, reserved = int(cuda.max_memory_allocated(device)), int(cuda.max_memory_reserved(device))
        if peak or reserved:
            found.append((device, peak, reserved))
    return Memory(tuple(found))


def note_only(directory: str, identity: ChildIdentity, text: str, capture: int = PYTHON) -> None:
    """A child that cannot be measured says so: a header, a note and nothing else."""
    now = time.time_ns()
    pid = os.getpid()
    path = child_file(directory, pid, now)
    header = Header(pid, os.getppid(), proc_start(pid), now, 0, REALTIME, capture, identity.flags, identity.program,
                    identity.command, identity.rank, identity.local_rank, identity.visible_devices)
    try:
        fd = open_for_append(path)
        try:
            append(fd, encode_header(header) + encode_note(Note(now, f"not measured: {text}"))
                   + encode_end(End(now, EXITED)))
        finally:
            os.close(fd)
    except OSError:
        pass
