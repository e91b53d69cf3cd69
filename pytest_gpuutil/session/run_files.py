"""What the run writes at its end, and where.

gpu_util.csv and gpu_util.json (the run document as :mod:`pytest_gpuutil.rundoc` builds it, with
the run's totals and the per-GPU table), the baselines asked for (``--gpu-util-save``,
``--gpu-util-autosave``) and the HTML report (``--gpu-util-html``). Per-test files
(``traces/<test>.json.gz``, ``memory/<test>.pickle``) are named by
:func:`~pytest_gpuutil.rundoc.document.safe_name`.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter, is_not
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from pytest_gpuutil.gates.baseline import free_autosave_name, save_baseline
from pytest_gpuutil.gates.regression import Comparison, FailExpr
from pytest_gpuutil.options import Settings
from pytest_gpuutil.records import TestRecord, json_dicts
from pytest_gpuutil.report.files import write_run_files
from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc.document import RunDoc, now_utc, run_document, safe_name

if TYPE_CHECKING:
    from pytest_gpuutil.history.series import Trend


def write_run(records: Sequence[TestRecord], machine: Mapping[str, Any], *, gpus: list[dict[str, Any]],
              totals: dict[str, Any], thresholds: dict[str, str], settings: Settings, output_dir: Path,
              invocation_dir: Path, baseline: Optional[RunDoc], fail_exprs: Sequence[FailExpr],
              comparison: Optional[Comparison], written: list[Path], usage_errors: list[str],
              created: Optional[str] = None, baseline_label: Optional[str] = None,
              trends: Optional[Mapping[str, Trend]] = None,
              timelines: Optional[Mapping[str, Mapping[str, Any]]] = None,
              as_dict: Optional[Callable[[TestRecord], dict[str, Any]]] = None,
              explanations: Optional[Mapping[str, Any]] = None,
              as_json: Optional[Callable[[TestRecord], Any]] = None) -> Optional[dict[str, Any]]:
    """Write gpu_util.csv/json, save the baselines asked for, write the HTML report if asked; the
    document's ``findings_summary`` (None: findings were looked for in no test), which the terminal's
    summary reuses (made once a run).

    Each file goes into ``written`` once it is written (an OSError stops the rest); an HTML report
    that cannot be written goes into ``usage_errors``. ``created``: the run's time (default now);
    ``baseline_label``: what the page calls the baseline; ``trends``: the page's trend lines;
    ``timelines``: the tests' timelines, written beside gpu_util.json (timelines.json.gz) and drawn on the page;
    ``as_dict``: a record's dict where one was made already (the spool's); ``as_json``: its JSON as
    the spool wrote it (``msgspec.Raw``), used where gpu_util.json is the document's only reader.
    """
    records = sorted(records, key=attrgetter("test"))
    created = created or now_utc()
    extra: dict[str, Any] = {}
    if any(map(attrgetter("counter_sums"), records)):
        from pytest_gpuutil.analysis.counters import summarise

        extra["counters"] = summarise((r.test, r.counter_sums) for r in records)  # per file and session
    found = None
    if any(map(is_not, map(attrgetter("findings"), records), repeat(None))):
        from pytest_gpuutil.analysis.findings import records_findings_summary

        found = extra["findings_summary"] = records_findings_summary(records, settings.findings_floor)
    if explanations:  # why each flagged test regressed (gates/explain.py), by test id
        extra["explanations"] = {test: e.to_dict() for test, e in explanations.items()}
    only_json = settings.html is None and not settings.save and not settings.autosave
    doc = run_document(records, machine, created, gpus=gpus, totals=totals, thresholds=thresholds,
                       as_dict=as_json if as_json is not None and only_json else as_dict, **extra)
    written.extend(write_run_files(output_dir, records, doc))
    if settings.html is not None:
        from pytest_gpuutil.report.timelines import write_sidecar

        sidecar = write_sidecar(output_dir, timelines or {})
        if sidecar is not None:
            written.append(sidecar)
    for name in filter(None, (settings.save, free_autosave_name(output_dir, machine) if settings.autosave else None)):
        written.append(save_baseline(doc, output_dir, name))
    if settings.html is not None:
        from pytest_gpuutil.report.html_report import (
            DEFAULT_NAME,
            baseline_view_of,
            write_html_report,
        )

        target = invocation_dir / settings.html if settings.html else output_dir / DEFAULT_NAME
        view = baseline_view_of(baseline, records, fail_exprs, comparison, baseline_label) if baseline else None
        try:
            from pytest_gpuutil.report.timelines import PAGE_BUDGET_BYTES

            written.append(write_html_report(target, doc, baseline=view, traces_dir=output_dir / "traces",
                                             trace_name=safe_name, trends=trends, timelines=timelines,
                                             timeline_budget=None if settings.timelines is None else PAGE_BUDGET_BYTES))
        except OSError as exc:
            usage_errors.append(f"--gpu-util-html: could not write {display_path(target)}: {exc}")
    return found


def encoded_records(records: Sequence[TestRecord]) -> list[bytes]:
    """Each record's JSON, as ``msgspec.json.encode(record.to_dict(), enc_hook=str)`` writes it: a
    batch's :func:`~pytest_gpuutil.records.json_dicts` encoded with a hook that refuses every type
    msgspec does not know, and where it refused, the record's json_dict with ``str`` for the rest."""
    import msgspec

    strict = msgspec.json.Encoder(enc_hook=_refuse).encode
    out = []
    for record, data in zip(records, json_dicts(records, _DICT_ITEMS_ONLY)):
        try:
            out.append(strict(data))
        except _Refused:  # a mapping json_dict copies, or a value that becomes its str
            out.append(msgspec.json.encode(record.json_dict(), enc_hook=str))
    return out


try:  # the batch's list fields checked in C (gates/_record_parts.c, built where a C compiler is found)
    from pytest_gpuutil.gates._record_parts import dict_items_only as _DICT_ITEMS_ONLY
except ImportError:  # pragma: no cover - without a compiler: records._dict_items_only
    _DICT_ITEMS_ONLY = None


class _Refused(Exception):
    """A value that :func:`encoded_records`' first encoding leaves to the record's json_dict."""


def _refuse(value: Any) -> Any:
    raise _Refused


#: beside gpu_util.json while the run goes on: each flush's records appended as JSON lines, removed
#: once gpu_util.json is written; a run killed mid-way leaves it (``gpuutil report DIR`` renders it)
SPOOL_NAME = "gpu_util.partial.jsonl"


class RunSpool:
    """Each flush's records appended to ``DIR/gpu_util.partial.jsonl`` (one JSON line each, after a
    first line that says what the file is), so a run killed mid-way keeps its tests up to its last
    flush. A spool that cannot be written is given up quietly: the run's files at its end still come."""

    def __init__(self, output_dir: Path, machine: Any = None):
        self.path = output_dir / SPOOL_NAME
        #: what the first line gets: the machine's description when known (a callable returning it, or None)
        self._machine = machine
        self._started = False
        self._broken = False
        #: each spooled record's JSON, by id(record): gpu_util.json reuses it (see :meth:`as_dict`). Bytes,
        #: not the dict: a dict holds ~10 lists and dicts that Python's collector tracks, and a run that
        #: keeps them for every test brought full collections (~0.1-0.2 s each, torch loaded) due among
        #: the tests (3,000 small tests of the synthetic GPU: one more than a plain run)
        self._encoded: dict[int, bytes] = {}
        #: msgspec.Raw, once the first records are spooled (only then can as_json find any)
        self._raw: Any = None

    def start(self) -> None:
        """Before the first test: an earlier run's spool goes."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            self._broken = True

    def append(self, records: Sequence[TestRecord]) -> None:
        """Append these records (and the header line first, the first time)."""
        if self._broken or not records:
            return
        try:
            self._append(records)
        except Exception:  # noqa: BLE001 - a disk, a missing module: the run's files at its end still come
            self._broken = True

    def _append(self, records: Sequence[TestRecord]) -> None:
        import msgspec

        self._raw = msgspec.Raw

        lines = []
        if not self._started:
            machine = self._machine() if callable(self._machine) else None
            lines.append({"format": "gpu_util-spool", "version": 1, "created": now_utc(),
                          "machine_info": dict(machine or {})})
        encode = msgspec.json.encode
        chunks = [encode(line, enc_hook=str) + b"\n" for line in lines]
        encoded = self._encoded
        for record, body in zip(records, encoded_records(records)):
            encoded[id(record)] = body
            chunks += (b'{"record":', body, b"}\n")  # as encode({"record": record.to_dict()}) writes it
        if not self._started:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as out:
            out.write(b"".join(chunks))
        self._started = True

    def as_json(self, record: TestRecord) -> Any:
        """The record as the spool wrote it (``msgspec.Raw``: the run document's encoder puts it in as it
        is), else its dict."""
        found = self._encoded.get(id(record))
        if found is None:
            return record.to_dict()
        return self._raw(found)

    def as_dict(self, record: TestRecord) -> dict[str, Any]:
        """The record's dict: the one spooled, read back (records are never changed once made; what
        JSON cannot say reads back as gpu_util.json writes it), else a new one."""
        found = self._encoded.get(id(record))
        if found is None:
            return record.to_dict()
        import msgspec

        return msgspec.json.decode(found)

    def remove(self) -> None:
        """The run's files are written: the spool is no longer needed."""
        try:
            self.path.unlink()
        except OSError:
            pass
