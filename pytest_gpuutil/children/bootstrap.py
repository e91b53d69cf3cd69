"""The child's bootstrap: started by the ``.pth`` file in every Python start-up (coverage.py's way).

``pytest_gpuutil_children.pth`` (installed into site-packages with the package) calls
:func:`startup` only when ``PYTEST_GPUUTIL_SPOOL`` is set, so a Python process outside a measured
test pays one environment lookup. When it is set:

- an import hook waits for ``torch``; once torch is imported, this process is measured from
  Python (``PYTEST_GPUUTIL_SELF`` = its pid, so the injection library leaves it alone) and the
  capture starts when torch initialises CUDA (``torch.cuda._lazy_call``): a child that imports
  torch but never uses the GPU (a DataLoader worker, a CPU helper) starts no CUPTI;
- a fork handler does the same in a forked child (``multiprocessing`` fork starts no new
  interpreter, so no ``.pth`` runs there); the pytest process registers it too;
- ``os._exit`` (how multiprocessing's forked children end) and ``atexit`` hand over the rest;
- SIGTERM (``Pool.__exit__``, ``Process.terminate()``, torchrun stopping its ranks) is handed
  over too, where the process had SIGTERM's default disposition at start (see :mod:`pytest_gpuutil.children.sigterm`),
  and a ``multiprocessing.Pool`` worker hands over after each task (see :func:`_pool_worker`);
- a pytest ``--gpu-util`` run in this process takes the capture over (:func:`take_over`), so
  the process has one CUPTI client and its work is not counted twice.

The process's measuring state is one object per interpreter (``_PROCESS``): the ``.pth`` runs
once per interpreter and a fork handler cannot be unregistered, so this state cannot belong to a
pytest session. Nothing heavy is imported until a capture starts.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from pytest_gpuutil.children.sigterm import SigtermHandOver, end_by_pending_signal, sigterm_is_default
from pytest_gpuutil.children.spool import INJECTED_ENV, SELF_ENV, SPOOL_ENV, period_from


class _Process:
    """This interpreter's child measurement (see the module docstring)."""

    def __init__(self) -> None:
        self.capture: Any = None  # ChildCapture once started
        self.armed = False  # a start waits for CUDA's initialisation
        self.import_hook = False
        self.fork_hook = False
        self.exit_wrapped = False
        self.forked = False
        #: SIGTERM's disposition was the default when this interpreter (or fork) started
        self.sigterm_default = False
        #: the SIGTERM hand-over, once installed (see children/sigterm.py)
        self.sigterm: Optional[SigtermHandOver] = None
        #: a SIGTERM that came while this process was finishing: it acts once the finish is done
        self.sigterm_pending = 0
        self.pool_hook = False
        #: a pytest --gpu-util run in this process measures it (the bootstrap stays out)
        self.nested = False
        self.problem = ""


_PROCESS = _Process()


def startup() -> None:
    """What the ``.pth`` file calls: arm the measurement of this process. Never raises."""
    try:
        if not os.environ.get(SPOOL_ENV):
            return
        _PROCESS.sigterm_default = sigterm_is_default()
        ensure_fork_hook()
        _install_pool_hook()
        torch = sys.modules.get("torch")
        if torch is not None:
            _torch_imported(torch)
        else:
            _install_import_hook()
    except Exception as exc:  # noqa: BLE001 - a child must never fail because of its measurement
        _PROCESS.problem = f"bootstrap failed: {exc}"


def current() -> Any:
    """The running ChildCapture of this process, or None."""
    return _PROCESS.capture


def take_over() -> Any:
    """A pytest --gpu-util run in this process measures it from now on.

    What the bootstrap collected is handed to the parent with an END chunk that says so; its
    running event source is returned for the run to reuse (None if none was started), so the
    process keeps one CUPTI client.
    """
    state = _PROCESS
    state.nested = True
    capture, state.capture = state.capture, None
    if capture is None:
        return None
    try:
        return capture.hand_over_to_nested()
    except Exception:  # noqa: BLE001
        return None


def ensure_fork_hook() -> None:
    """Measure forked children too (registered once per process)."""
    if _PROCESS.fork_hook or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _PROCESS.fork_hook = True


def _after_fork_in_child() -> None:
    try:
        if not os.environ.get(SPOOL_ENV):
            return
        state = _PROCESS
        inherited, state.capture = state.capture, None
        if inherited is not None:
            inherited.abandon()  # the parent's file and thread: not this process's
        state.armed = False
        state.nested = False  # a fork of a measuring pytest process is one of its children
        state.forked = True
        if state.sigterm is None:  # an inherited hand-over goes on working (it reads this process's state)
            state.sigterm_default = sigterm_is_default()
        torch = sys.modules.get("torch")
        if torch is not None:
            _torch_imported(torch)
        else:
            _install_import_hook()
    except Exception as exc:  # noqa: BLE001
        _PROCESS.problem = f"fork handler failed: {exc}"


# -- the import hook --------------------------------------------------------------------------------
class _AfterImport:
    """A meta path finder that notices ``import NAME`` and calls back once it has run."""

    def __init__(self, name: str, after: Callable[[Any], None]):
        self.name = name
        self.after = after

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.util

        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenCall(spec.loader, self.after)
        return spec

    def invalidate_caches(self) -> None:
        pass


class _ThenCall:
    """A loader that runs the real one, puts it back on the module, then calls back."""

    def __init__(self, loader: Any, after: Callable[[Any], None]):
        self._loader = loader
        self._after = after

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _install_import_hook() -> None:
    if _PROCESS.import_hook:
        return
    sys.meta_path.insert(0, _AfterImport("torch", _torch_imported_safely))
    _PROCESS.import_hook = True


def _torch_imported_safely(torch: Any) -> None:
    try:
        _torch_imported(torch)
    except Exception as exc:  # noqa: BLE001
        _PROCESS.problem = f"could not arm the capture: {exc}"


# -- starting -----------------------------------------------------------------------------------------
def _injected_here() -> bool:
    """Whether the injection library already measures this process (CUDA started before torch)."""
    import ctypes

    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    getenv.argtypes = [ctypes.c_char_p]
    value = getenv(INJECTED_ENV.encode())
    return bool(value) and value.decode(errors="replace") == str(os.getpid())


def _torch_imported(torch: Any) -> None:
    """torch is here: this process is measured from Python; start at CUDA's initialisation."""
    state = _PROCESS
    if state.nested or state.capture is not None or state.armed or not os.environ.get(SPOOL_ENV):
        return
    if _injected_here():
        return
    os.environ[SELF_ENV] = str(os.getpid())
    cuda = getattr(torch, "cuda", None)
    lazy = getattr(cuda, "_lazy_call", None)
    state.armed = True
    if cuda is not None and (lazy is None or cuda.is_initialized()):
        _start(torch)
    elif lazy is not None:
        lazy(lambda: _start_quietly(torch))


def _start_quietly(torch: Any) -> None:
    try:  # runs inside torch's CUDA initialisation: it must never raise there
        _start(torch)
    except Exception as exc:  # noqa: BLE001
        _PROCESS.problem = f"capture did not start: {exc}"


def _start(torch: Any) -> None:
    state = _PROCESS
    state.armed = False
    if state.nested or state.capture is not None:
        return
    directory = os.environ.get(SPOOL_ENV)
    if not directory:
        return
    from pytest_gpuutil.children.child_capture import (ChildCapture, ChildIdentity, note_only, torch_memory,
                                                          torch_synchronize)
    from pytest_gpuutil.children.spool_format import FORKED

    identity = ChildIdentity.of_this_process(forked=state.forked, flags=FORKED if state.forked else 0)
    began = time.perf_counter_ns()
    try:
        from pytest_gpuutil.capture.cupti import CuptiSource

        source = CuptiSource(demangle=getattr(torch._C, "_demangle", None))
        source.start()
    except Exception as exc:  # noqa: BLE001 - said in the record instead
        note_only(directory, identity, f"CUPTI did not start ({exc})")
        return
    startup_ns = time.perf_counter_ns() - began
    enabled = getattr(torch.autograd, "_profiler_enabled", None)
    capture = ChildCapture(directory, source, identity, period_from(os.environ), memory=lambda: torch_memory(torch),
                           settle=lambda: torch_synchronize(torch), library=source.library_path,
                           profiler_active=(lambda: bool(enabled())) if enabled is not None else (lambda: False))
    try:
        capture.open(startup_ns)
    except OSError:  # no spool (the parent has ended): nothing to hand over to
        source.stop()
        return
    state.capture = capture
    capture.run_in_background()
    _hand_over_at_exit()
    _arm_sigterm()
    _hand_over_after_synchronize(torch)
    try:
        from pytest_gpuutil.capture.profiler import guard_profiler_starts

        guard_profiler_starts(torch, _before_profiler)
    except Exception:  # noqa: BLE001
        pass


def _hand_over_after_synchronize(torch: Any) -> None:
    """Wrap ``torch.cuda.synchronize``: once it returns, nothing of a one-device process runs, and its
    records so far go to the spool (a burst's end; see ChildCapture.after_synchronize)."""
    cuda = getattr(torch, "cuda", None)
    original = getattr(cuda, "synchronize", None)
    if original is None or getattr(original, "_pytest_gpuutil", False):
        return
    from pytest_gpuutil.children.child_capture import torch_devices_used

    def idle() -> bool:
        return len(torch_devices_used(torch)) <= 1

    def synchronize(device: Any = None) -> Any:
        result = original(device)
        capture = _PROCESS.capture
        if capture is not None:
            try:
                capture.after_synchronize(idle)
            except Exception:  # noqa: BLE001 - the program's synchronize must never fail because of this
                pass
        return result

    synchronize.__doc__, synchronize.__name__ = original.__doc__, getattr(original, "__name__", "synchronize")
    synchronize.__qualname__ = getattr(original, "__qualname__", "synchronize")
    synchronize.__module__ = getattr(original, "__module__", "torch.cuda")
    synchronize.__wrapped__ = original  # type: ignore[attr-defined]
    synchronize._pytest_gpuutil = True  # type: ignore[attr-defined]
    try:
        cuda.synchronize = synchronize
    except Exception:  # noqa: BLE001 - a read-only module: hand-overs stay periodic
        pass


def _before_profiler() -> None:
    capture = _PROCESS.capture
    if capture is not None:
        capture.before_profiler()


def _finish() -> None:
    capture = _PROCESS.capture
    if capture is not None:
        capture.finish()
    end_by_pending_signal(_PROCESS)


def _hand_over_at_exit() -> None:
    """atexit for a normal end; ``os._exit`` (multiprocessing's forked children) wrapped once."""
    state = _PROCESS
    if state.exit_wrapped:
        return
    import atexit

    atexit.register(_finish)
    original: Callable[[int], Any] = os._exit

    def _exit(code: int) -> Any:
        try:
            _finish()
        except Exception:  # noqa: BLE001
            pass
        return original(code)

    os._exit = _exit
    state.exit_wrapped = True


# -- SIGTERM -------------------------------------------------------------------------------------------
def _arm_sigterm() -> None:
    """Install the SIGTERM hand-over once a capture runs (from the main thread only, where
    ``signal.signal`` works; a capture started in another thread tries again from the main
    thread between Pool tasks)."""
    state = _PROCESS
    if state.sigterm is not None or not state.sigterm_default or threading.current_thread() is not threading.main_thread():
        return
    try:
        import signal

        current = signal.getsignal(signal.SIGTERM)
        if not (callable(current) or current == signal.SIG_DFL):
            return  # ignored since start-up, or a handler set outside Python: the program's choice
        handover = SigtermHandOver(signal, current, state)
        handover.install()
        state.sigterm = handover
    except Exception as exc:  # noqa: BLE001 - the child runs on; SIGTERM then loses its last period
        state.problem = f"SIGTERM hand-over not installed: {exc}"
        state.sigterm_default = False


# -- multiprocessing.Pool workers -------------------------------------------------------------------
#: a Pool worker hands over after a task unless it did less than this ago (bounds the cost for
#: many short tasks; SIGTERM or the exit hands the rest over)
POOL_HAND_OVER_GAP_S = 0.05


def ensure_pool_hook() -> None:
    """The pytest process's side of :func:`_install_pool_hook` (its forked Pool workers inherit it)."""
    _install_pool_hook()


def _install_pool_hook() -> None:
    """Wrap ``multiprocessing.pool.worker`` (now, or when it is imported) so that a Pool worker
    hands over after its tasks; a spawned worker resolves the wrapper by name when it unpickles
    its Process object, a forked one inherits it from a parent that imported the pool."""
    if _PROCESS.pool_hook:
        return
    _PROCESS.pool_hook = True
    module = sys.modules.get("multiprocessing.pool")
    if module is not None:
        _wrap_pool_worker(module)
    else:
        sys.meta_path.insert(0, _AfterImport("multiprocessing.pool", _wrap_pool_worker))


def _wrap_pool_worker(module: Any) -> None:
    try:
        original = module.worker
        if getattr(original, "_pytest_gpuutil", False):
            return

        def worker(inqueue: Any, outqueue: Any, *args: Any, **kwargs: Any) -> Any:
            return original(inqueue, _HandOverBeforePut(outqueue), *args, **kwargs)

        worker.__module__, worker.__qualname__, worker.__name__ = original.__module__, original.__qualname__, original.__name__
        worker.__doc__ = original.__doc__
        worker._pytest_gpuutil = True  # type: ignore[attr-defined]
        worker.__wrapped__ = original  # type: ignore[attr-defined]
        module.worker = worker
    except Exception as exc:  # noqa: BLE001
        _PROCESS.problem = f"Pool workers do not hand over per task: {exc}"


class _HandOverBeforePut:
    """A Pool worker's result queue: before each result goes out, the task's GPU work is handed over."""

    def __init__(self, queue: Any):
        self._queue = queue

    def put(self, obj: Any) -> None:
        _after_pool_task()
        self._queue.put(obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def _after_pool_task() -> None:
    """Hand over on the worker process's main thread (a ThreadPool's workers are threads: not there)."""
    capture = _PROCESS.capture
    if capture is None or threading.current_thread() is not threading.main_thread():
        return
    try:
        _arm_sigterm()
        if time.monotonic() - capture.last_hand_over >= POOL_HAND_OVER_GAP_S:
            capture.hand_over_now()
    except Exception:  # noqa: BLE001 - the result goes out whatever happened
        pass


def problem() -> Optional[str]:
    """Why this process's bootstrap could not do its job (for diagnostics), or None."""
    return _PROCESS.problem or None
