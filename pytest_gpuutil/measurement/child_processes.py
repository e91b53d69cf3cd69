"""The GPU work of the processes the tests start (--gpu-util-children): the spool they hand it to."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pytest_gpuutil.measurement.part import MeasurementPart

if TYPE_CHECKING:
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.children.collect import ProcessTree
    from pytest_gpuutil.measurement.part import Setup


class ChildProcesses(MeasurementPart):
    """The children's spool and merge, while the continuous capture runs with children on."""

    def __init__(self, on: bool, classifier: KernelClassifier):
        self._on = on
        self._classifier = classifier
        self.tree: Optional[ProcessTree] = None
        #: why child processes are not measured although asked for ("" when they are, or not asked)
        self.problem = ""
        #: what the children's side had to say when the session ended (kept for the summary)
        self.summary: Optional[dict[str, Any]] = None

    def start(self, setup: Setup) -> None:
        if not self._on:
            return
        windows = setup.windows
        if windows.capture is None or windows.source is None:
            self.problem = windows.children_problem
            return
        from pytest_gpuutil.machine.loaded_libraries import find_loaded_library
        from pytest_gpuutil.children.collect import start_process_tree

        source = windows.source
        try:
            self.tree = start_process_tree(
                self._classifier, source.now, demangle=getattr(setup.torch._C, "_demangle", None),
                cupti_library=getattr(source, "library_path", None) or find_loaded_library())
        except Exception as exc:  # noqa: BLE001 - this process's own measuring goes on
            self.problem = f"child processes are not measured: {exc}"
            return
        windows.capture.children = self.tree

    def close(self) -> None:
        """The spool is removed (children still running are noted, never waited for long)."""
        if self.tree is None:
            return
        tree, self.tree = self.tree, None
        try:
            tree.close()
        finally:
            self.summary = tree.summary()

    def info(self) -> dict[str, Any]:
        """What the summary says of this process's child processes (JSON-able; empty when off)."""
        info: dict[str, Any] = dict(self.summary or {})
        if self.tree is not None:
            info = self.tree.summary()
        if self.problem:
            info["problem"] = self.problem
        return info
