"""SIGTERM's hand-over in a measured child: its records go to the spool before the signal ends it.

``Pool.__exit__``, ``Process.terminate()`` and torchrun stopping its ranks end children with
SIGTERM; its default action would end the process before its last hand-over. The bootstrap
(:mod:`pytest_gpuutil.children.bootstrap`) installs :class:`SigtermHandOver` once a capture runs.
Nothing here imports more than the standard library.
"""
from __future__ import annotations

import os
import time
from typing import Any


def sigterm_is_default() -> bool:
    """Whether SIGTERM has its default disposition here (``_signal``: no import of ``signal``)."""
    import _signal

    handler = _signal.getsignal(_signal.SIGTERM)
    return handler == _signal.SIG_DFL or bool(getattr(handler, "_pytest_gpuutil", False))


class SigtermHandOver:
    """SIGTERM's hand-over: what the program set (``visible``) stays its view, ours runs first.

    Installed when the capture starts, only where SIGTERM had the default disposition when the
    process started (a handler inherited, or ignoring, is the parent's decision: left alone):

    - the default: hand everything over (END chunk "terminated"), restore the default and send
      the signal again, so the process ends as it would have (exit status -SIGTERM, 143 in a shell);
    - a handler the program installed before (between start-up and CUDA) or after (through
      ``signal.signal``, which is wrapped for SIGTERM): hand over what there is, the capture going
      on, then call the program's handler (it may end the process, or not);
    - the program ignores SIGTERM (``SIG_IGN``): it is left so, nothing ends the process.

    ``signal.getsignal`` and ``signal.signal``'s return value show the program its own handler.
    Limits: a handler set through ``_signal`` or a ``signal.signal`` bound before the capture
    started (``from signal import signal`` at import time) replaces ours (its own end then hands
    over at exit, unless it re-raises the signal); Python runs handlers in the main thread between
    bytecodes, so a main thread stuck in a long C call delays the hand-over; SIGKILL cannot be
    handled (the child's last period is lost, said in the record).
    """

    def __init__(self, module: Any, visible: Any, state: Any):
        self.module = module
        #: the process's measurement state (bootstrap's): its ``capture``, ``sigterm``, ``sigterm_pending``
        self.state = state
        self.set_handler = module.signal
        self.get_handler = module.getsignal
        self.visible = visible
        self.active = True

        def handle(signum: int, frame: Any) -> Any:
            return self.handle(signum, frame)

        handle._pytest_gpuutil = True  # type: ignore[attr-defined]
        self.handler = handle

    def handle(self, signum: int, frame: Any) -> Any:
        visible, capture = self.visible, self.state.capture
        if callable(visible):
            if capture is not None:
                try:
                    capture.hand_over_now()
                except Exception:  # noqa: BLE001 - the program's handler runs whatever happened
                    pass
            return visible(signum, frame)
        if capture is not None:
            from pytest_gpuutil.children.spool_format import TERMINATED

            try:
                capture.finish(TERMINATED)
            except Exception:  # noqa: BLE001
                pass
            if capture.finish_interrupted:
                # the signal came while this thread was finishing (the process ending on its own: a
                # Pool worker that got its sentinel as its pool was terminated): that finish writes the
                # END chunk, then the signal ends the process (see end_by_pending_signal)
                self.state.sigterm_pending = signum
                return None
        self.end_by(signum)

    def end_by(self, signum: int) -> None:
        """End the process as the signal's default action would (exit status -signum)."""
        self.set_handler(signum, self.module.SIG_DFL)
        os.kill(os.getpid(), signum)  # ends the process now: the default action of a fatal signal
        time.sleep(1.0)
        os._exit(128 + signum)  # never reached on Linux; a last resort with the shell's status

    def install(self) -> None:
        self.set_handler(self.module.SIGTERM, self.handler)
        set_handler, get_handler, sigterm = self.set_handler, self.get_handler, int(self.module.SIGTERM)
        import functools

        @functools.wraps(set_handler)
        def signal_(signalnum: Any, handler: Any) -> Any:
            if not _is(signalnum, sigterm) or self.state.sigterm is not self:
                return set_handler(signalnum, handler)
            return self.program_sets(handler)

        @functools.wraps(get_handler)
        def getsignal(signalnum: Any) -> Any:
            if _is(signalnum, sigterm) and self.active and self.state.sigterm is self:
                return self.visible
            return get_handler(signalnum)

        self.module.signal, self.module.getsignal = signal_, getsignal

    def program_sets(self, handler: Any) -> Any:
        """The program sets SIGTERM's handler: ours stays in front of a handler or the default."""
        previous = self.visible if self.active else self.get_handler(self.module.SIGTERM)
        if callable(handler) or (not isinstance(handler, bool) and isinstance(handler, int)
                                 and handler == self.module.SIG_DFL):
            self.set_handler(self.module.SIGTERM, self.handler)  # raises as signal.signal would (not the main thread)
            self.visible, self.active = handler, True
        else:  # SIG_IGN, or something signal.signal refuses (it raises the same error)
            self.set_handler(self.module.SIGTERM, handler)
            self.visible, self.active = handler, False
        return previous


def _is(signalnum: Any, number: int) -> bool:
    try:
        return int(signalnum) == number
    except (TypeError, ValueError):
        return False


def end_by_pending_signal(state: Any) -> None:
    """After a finish that a SIGTERM interrupted (see :meth:`SigtermHandOver.handle`): the signal
    acts now, as it would have."""
    signum, handover = state.sigterm_pending, state.sigterm
    if signum and handover is not None:
        state.sigterm_pending = 0
        handover.end_by(signum)
