"""The end-of-session summary, written through pytest's terminal reporter."""
from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import compress, repeat
from math import isnan
from operator import attrgetter, ge, is_not
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence

from pytest_gpuutil.report.tables import Column, fit_table, shorten_kernel, shorten_test_id, wrap

if TYPE_CHECKING:
    from pytest_gpuutil.gates.regression import Comparison, FailExpr
    from pytest_gpuutil.rundoc.document import RunDoc
    from pytest_gpuutil.records import TestRecord


class RunState(Protocol):
    """What the summary reads from the run's state (the plugin's GpuUtilSession provides it)."""

    settings: Any
    records: list[TestRecord]
    usage_errors: list[str]
    trace_errors: list[str]
    thresholds_not_checked: list[str]
    baseline_messages: list[str]
    baseline: Optional[RunDoc]
    comparison: Optional[Comparison]
    #: what the gate calls its baseline when that is not a baseline file (the run history), else ""
    compare_label: str
    #: lines after the gate's verdict (changes within the history's noise)
    gate_notes: list[str]
    fail_exprs: Sequence[FailExpr]
    metric_rows_written: int
    #: per process (worker id or "main"): mode, source, startup_s, fallback, broken
    processes: dict[str, dict[str, Any]]
    output_dir: Path
    written: list[Path]
    #: the measurement cost (ms) written into gpu_util.json and the page, before this summary's own time
    written_measure_ms: Optional[float]

    def has_output(self) -> bool: ...
    def no_cuda(self) -> bool: ...
    def measured(self) -> list[TestRecord]: ...
    def totals(self) -> dict[str, Any]: ...
    def machine_info(self) -> dict[str, Any]: ...
    def gpu_table(self) -> list[dict[str, Any]]: ...


SECTION = "GPU utilization (pytest-gpuutil)"
#: the top-tests table's columns that only a run with hardware counters has
COUNTER_FIELDS = ("sm_pct", "tensor_pct")

#: the narrowest a test id is cut to, and the width it keeps before optional columns come in
_TEST_MIN, _TEST_FAIR = 36, 64

#: Columns of the top-tests table, by priority (tables.OPTIONAL and up: where there is room, or -v).
#: Other measurements add a Column here (its ``name`` is the TestRecord field it shows).
TEST_COLUMNS: tuple[Column, ...] = (
    Column("test", "test", priority=0, min_width=_TEST_MIN, fair_width=_TEST_FAIR, cut=shorten_test_id, test_ids=True),
    Column("outcome", "outcome", priority=15),
    Column("wall_ms", "wall ms", ".3f", priority=13),
    Column("gpu_busy_ms", "GPU ms", ".3f", priority=2),
    Column("busy_pct", "busy %", ".1f", priority=1),
    Column("sm_pct", "SM %", ".1f", priority=5),  # hardware counters: shown when the run has them
    Column("tensor_pct", "tensor %", ".1f", priority=6),
    Column("mm_conv_pct", "mm/conv %", ".1f", priority=3),
    Column("attention_pct", "attn %", ".1f", priority=14),
    Column("communication_pct", "comm %", ".1f", priority=16),
    Column("peak_alloc_mb", "peak MiB", ".1f", priority=4),
    Column("kernel_count", "kernels", "d", priority=11),
    Column("top_kernel", "top kernel", priority=12, min_width=24, fair_width=48, cut=shorten_kernel),
)

#: Columns of the top-tests-by-memory table.
MEMORY_TITLE = "top tests by peak GPU memory"
MEMORY_COLUMNS: tuple[Column, ...] = (
    Column("test", MEMORY_TITLE, priority=0, min_width=_TEST_MIN, fair_width=_TEST_FAIR, cut=shorten_test_id,
           test_ids=True),
    Column("outcome", "outcome", priority=13),
    Column("peak_alloc_mb", "peak MiB", ".1f", priority=1),
    Column("peak_reserved_mb", "reserved MiB", ".1f", priority=2),
    Column("leaked_mb", "left behind MiB", ".1f", priority=3),
    Column("alloc_retries", "retries", "d", priority=12),
    Column("ooms", "OOMs", "d", priority=11),
)

#: Columns of the regression table (rows from gates.regression.regression_rows).
REGRESSION_COLUMNS: tuple[Column, ...] = (
    Column("test", "test", priority=0, min_width=_TEST_MIN, fair_width=_TEST_FAIR, cut=shorten_test_id, test_ids=True),
    Column("metric", "metric", priority=1),
    Column("baseline", "baseline", priority=2, align="right"),
    Column("now", "now", priority=3, align="right"),
    Column("change", "change", priority=4, align="right"),
    Column("limit", "limit", priority=5, align="right"),
)


@dataclass(frozen=True)
class Terminal:
    """What the summary is fitted to: the terminal's width, and whether -v asked for every column."""

    width: int = 80
    verbose: bool = False

    @classmethod
    def of(cls, tr: Any) -> Terminal:
        """The terminal reporter's writer width (COLUMNS or the real terminal) and -v."""
        try:
            width = int(tr.config.get_terminal_writer().fullwidth)
        except (AttributeError, TypeError, ValueError):
            width = 80
        return cls(width=max(width, 40), verbose=(getattr(tr.config.option, "verbose", 0) or 0) > 0)


def top_tests_table(state: RunState, terminal: Terminal = Terminal()) -> str:
    """The tests with the most GPU time (one line when none launched GPU work)."""
    profiled = state.measured()
    measured = list(compress(profiled, map(any, zip(map(attrgetter("kernel_count"), profiled),
                                                    map(attrgetter("gpu_busy_ms"), profiled)))))
    if not measured:
        return f"top tests by GPU time: none ({_count(len(profiled), 'test')} measured, none launched GPU work)"
    measured = top_records(measured, "gpu_busy_ms", state.settings.top)
    counters = {c.name for c in TEST_COLUMNS if c.name in COUNTER_FIELDS}
    shown = [c for c in TEST_COLUMNS
             if c.name not in counters or any(getattr(r, c.name) is not None for r in measured)]
    return fit_table(shown, measured, terminal.width, every_column=terminal.verbose)


def top_memory_table(state: RunState, terminal: Terminal = Terminal()) -> str:
    """The tests with the highest peak of allocated GPU memory ("" when none was measured; one
    line when no test allocated any, left any behind, retried or ran out)."""
    with_memory = list(compress(state.records, map(is_not, map(attrgetter("peak_alloc_mb"), state.records),
                                                   repeat(None))))
    if not with_memory:
        return ""
    if not any(map(_memory_to_tell, with_memory)):
        return f"{MEMORY_TITLE}: none, every peak is 0.0 MiB ({_count(len(with_memory), 'test')} measured)"
    with_memory = top_records(with_memory, "peak_alloc_mb", state.settings.top)
    return fit_table(MEMORY_COLUMNS, with_memory, terminal.width, every_column=terminal.verbose)


def top_records(records: Sequence[TestRecord], field: str, top: int) -> list[TestRecord]:
    """``sorted(records, key=lambda r: (-(getattr(r, field) or 0.0), r.test))[:top]`` (all of them
    when ``top`` is 0), sorting only the records whose value reaches the top ones' (where the values
    are numbers, none of them NaN: the same records in the same order)."""
    value = attrgetter(field)

    def key(record: TestRecord) -> tuple[Any, str]:
        return -(value(record) or 0.0), record.test

    if not top:
        return sorted(records, key=key)
    if len(records) > 4 * top:
        values = list(map(value, records))
        try:
            if not isnan(sum(values)):
                least = sorted(values, reverse=True)[top - 1]
                records = list(compress(records, map(ge, values, repeat(least))))
        except TypeError:  # None among them (taken as 0.0), or no numbers: all are sorted
            pass
    return sorted(records, key=key)[:top]


def _memory_to_tell(record: TestRecord) -> bool:
    """Whether the memory table's row of ``record`` would show anything but zeros (as printed, 0.1 MiB steps)."""
    sizes = (record.peak_alloc_mb, record.leaked_mb)
    return any(size is not None and round(size, 1) != 0 for size in sizes) or bool(record.alloc_retries or record.ooms)


def totals_line(state: RunState) -> str:
    """The session's totals in one line (the terminal wraps it; the job summary takes it whole)."""
    t = state.totals()
    return "; ".join(_totals_clauses(t, state.machine_info()))


def _totals_clauses(t: dict[str, Any], info: dict[str, Any]) -> list[str]:
    """The totals line's clauses: GPU busy over the profiled calls, then what the tests did."""
    gpu = f"{info.get('gpu_count') or 0} x {info.get('gpu_model')}" if info.get("gpu_model") else "no GPU"
    return [
        f"session GPU busy {t['busy_pct']:.1f}%: {t['gpu_busy_ms']:.3f} ms of GPU work in "
        f"{t['profiled_wall_ms']:.3f} ms of profiled test calls",
        f"{t['profiled']} tests profiled, {_no_gpu_work(t)} ({gpu})",
    ]


def _no_gpu_work(t: dict[str, Any]) -> str:
    """How many profiled tests launched no GPU work themselves, and where the work was when tests
    started processes (see where_the_work_was)."""
    return where_the_work_was(t)


def where_the_work_was(t: dict[str, Any]) -> str:
    """"M launched no GPU work", and, when tests started processes, where their GPU work was: a
    test whose children used the GPU is never called GPU-free."""
    unmeasured = t.get("child_work_not_measured", 0)
    parts = []
    if t.get("with_gpu_work_only_in_children"):
        parts.append(f"{t['with_gpu_work_only_in_children']} with GPU work only in child processes")
    if unmeasured:
        parts.append(f"{unmeasured} started processes whose GPU work was not measured")
    parts.append(f"{t['profiled'] - t['with_gpu_work'] - unmeasured} launched no GPU work")
    return ", ".join(parts)


def children_lines(state: RunState) -> list[str]:
    """What measuring the tests' child processes cost, and what went wrong with it."""
    children = state.totals().get("children") or {}
    lines = []
    if children.get("measured"):
        lines.append(
            f"child processes: {children['measured']} measured, CUPTI start-up "
            f"{children['startup_ms_median']:.1f} ms each (median; longest {children['startup_ms_max']:.1f} ms), "
            "paid by each child once, not charged to GPU time")
    lines.extend(f"child processes: {n}" for n in children.get("notes", ()))
    return lines


def measurement_lines(state: RunState) -> list[str]:
    """How tests were measured: the profiler's one-time start-up, and what measuring cost."""
    lines = []
    t = state.totals()
    processes = state.processes.values()
    startups = [p["startup_s"] for p in processes if p.get("startup_s") is not None]
    sources = sorted({p["source"] for p in processes if p.get("source")})
    if startups:
        each = f" (each of {len(startups)} processes; longest)" if len(startups) > 1 else ""
        lines.append(f"profiler start-up {max(startups):.3f} s{each} ({', '.join(sources)}), "
                     "not charged to any test")
    if t["measure_ms"]:
        lines.append(
            f"measurement cost {t['measure_ms'] / 1000:.3f} s ({t['measure_in_tests_ms'] / 1000:.3f} s with the tests, "
            f"the rest at the end), {t['measure_share_pct']:.1f}% of the {t['test_s']:.2f} s the tests took "
            f"({_count(t['profiled'], 'test')} measured)"
        )
        torch_ms = t.get("torch_calls_ms")
        if torch_ms:
            lines.append(f"  (of which torch's synchronize and allocator reads with CUPTI's clock {torch_ms / 1000:.3f} s, "
                         "at the tests' edges: what any per-test measuring pays; docs: cost)")
        unseen = t.get("measure_unseen_ms") or 0.0
        if unseen >= 1.0:
            lines.append(f"  ({unseen / 1000:.3f} s of it estimated inside the tests, where no timer of the plugin's "
                         "sees it: CUPTI's records, the stack sampler; docs: cost)")
        written = state.written_measure_ms
        if written and t["measure_ms"] - written >= 1.0:
            lines.append(f"  ({written / 1000:.3f} s in gpu_util.json and the HTML page: written before this summary)")
    return lines


def counter_lines(state: RunState) -> list[str]:
    """The hardware counters: the session's figures, why they fell back, what they cost."""
    from pytest_gpuutil.report.counters_summary import cost_line, fallback_lines, session_line

    processes = list(state.processes.values())
    lines = [session_line(state.records, processes), *fallback_lines(processes),
             cost_line(processes, state.totals()["test_s"])]
    return [line for line in lines if line]


def measurement_warnings(state: RunState) -> list[str]:
    """Why tests were measured the slow way, or not at all (one line per distinct reason)."""
    reasons = [p.get("broken") or p.get("fallback") for p in state.processes.values()]
    reasons += [(p.get("children") or {}).get("problem") for p in state.processes.values()]
    return list(dict.fromkeys(r for r in reasons if r))


def no_cuda_line(outcomes: list[str]) -> str:
    """What happened on a machine without CUDA: every test skipped, or how many ran unmeasured."""
    skipped = sum(1 for o in outcomes if o == "skipped")
    if outcomes and skipped == len(outcomes):
        return f"{_count(skipped, 'test')} skipped: no CUDA device found, nothing measured"
    ran = f"{_count(len(outcomes), 'test')} ran" + (f", {skipped} skipped" if skipped else "")
    return f"no CUDA device found: GPU fields are empty in the files ({ran})"


def write_summary(state: RunState, tr: Any) -> None:
    if not state.has_output() and not state.usage_errors and state.settings.compare is None:
        return  # with --gpu-util-compare the gate's outcome is always reported (it may set the exit status)
    terminal = Terminal.of(tr)

    def say(text: str, **markup: bool) -> None:
        for line in wrap(text, terminal.width):
            tr.write_line(line, **markup)

    tr.write_sep("-", SECTION)
    for error in state.usage_errors:  # messages stay one line each (they name files; CI logs are grepped)
        tr.write_line(f"ERROR: {error}", red=True)
    for problem in measurement_warnings(state) + state.trace_errors + state.unavailable:
        tr.write_line(f"WARNING: {problem}", yellow=True)
    if state.settings.enabled and state.no_cuda():
        tr.write_line(no_cuda_line([r.outcome for r in state.records]))
    elif state.settings.enabled:
        if state.measured():
            write_table(top_tests_table(state, terminal), tr, terminal)
        say(totals_line(state))
        # what the section shows after the cost line is made before it, so that the line counts it
        later = counter_lines(state), top_memory_table(state, terminal), findings_lines(state, terminal)
        for line in measurement_lines(state) + children_lines(state):
            say(line)
        counters, memory, findings = later
        for line in counters:
            say(line)
        write_table(memory, tr, terminal)
        write_finding_lines(findings, tr)
        gpus = state.gpu_table()
        if len(gpus) > 1 or any(w != "main" for g in gpus for w in g["workers"]):
            say(
                "per GPU: "
                + "; ".join(f"GPU {g['gpu']}: {g['busy_ms']:.3f} ms busy, {g['tests']} tests ({', '.join(g['workers'])})" for g in gpus)
            )
    if state.thresholds_not_checked:
        not_checked = state.thresholds_not_checked
        why = ("no GPU measurement, or only memory limits under --gpu-util-memory=off" if not state.settings.memory
               else "no GPU measurement")
        head = f"gpu_util thresholds NOT CHECKED for {_count(len(not_checked), 'test')} ({why}):"
        more = [f"and {len(not_checked) - 5} more"] if len(not_checked) > 5 else []
        one_line = f"{head} {', '.join(not_checked[:5] + more)}"
        if len(one_line) <= terminal.width:
            tr.write_line(one_line)
        else:  # one test a line, each id cut to fit
            say(head)
            for text in [shorten_test_id(t, terminal.width - 2) for t in not_checked[:5]] + more:
                tr.write_line("  " + text)
    write_gate(state, tr, terminal)
    if state.metric_rows_written:
        say(f"metric tables: {state.metric_rows_written} rows in "
            f"{display_path(Path(state.output_dir) / 'metric_table_*.csv')}")
    if state.written:
        say("wrote " + ", ".join(display_path(p) for p in state.written))
    _github_step_summary(state)


def write_table(text: str, tr: Any, terminal: Terminal) -> None:
    """A fitted table as it is, or the one line that stands for a table with nothing to tell, wrapped."""
    if "\n" in text:
        tr.write_line(text)
        return
    for line in wrap(text, terminal.width) if text else ():
        tr.write_line(line)


def findings_lines(state: RunState, terminal: Terminal = Terminal()) -> list[str]:
    """What to fix, by rule, with the worst tests (none when findings were off), fitted to the terminal."""
    from pytest_gpuutil.report.findings_report import finding_lines

    return finding_lines(state.records, terminal.width, terminal.verbose, state.settings.findings_floor,
                         getattr(state, "findings_summary", ...))  # gpu_util.json's, when written


def write_finding_lines(lines: list[str], tr: Any) -> None:
    """The findings' section (nothing when there are no lines)."""
    if not lines:
        return
    from pytest_gpuutil.report.findings_report import SECTION as FINDINGS

    tr.write_sep("-", FINDINGS)
    for line in lines:
        tr.write_line(line)


def write_findings(state: RunState, tr: Any, terminal: Terminal = Terminal()) -> None:
    """What to fix, by rule, with the worst tests (nothing when findings were off), fitted to the terminal."""
    write_finding_lines(findings_lines(state, terminal), tr)


def write_gate(state: RunState, tr: Any, terminal: Terminal = Terminal()) -> None:
    """The baseline comparison's outcome: its messages one line each, the regressions as a fitted table."""
    for message in state.baseline_messages:
        tr.write_line(f"WARNING: {message}", yellow=True)
    if state.settings.compare is None:
        return
    if state.baseline is None:
        if state.settings.compare_strict:
            tr.write_line("FAILED: no baseline to compare with (--gpu-util-compare-strict)", red=True)
        return
    comparison = state.comparison
    if comparison is None:
        return
    from pytest_gpuutil.gates.regression import REGRESSION_HEADERS, regression_rows

    from pytest_gpuutil.gates.coverage import coverage_lines

    where = state.compare_label or f"baseline {display_path(state.baseline.path)}"
    if comparison.regressions:
        tr.write_sep("-", f"GPU regressions against {where}", red=True)
        rows = [dict(zip(REGRESSION_HEADERS, row)) for row in regression_rows(comparison.regressions)]
        tr.write_line(fit_table(REGRESSION_COLUMNS, rows, terminal.width, every_column=terminal.verbose))
        write_explanations(state, tr, terminal)
        tr.write_line(
            f"FAILED: {len(comparison.regressions)} regression(s) in {len({r.test for r in comparison.regressions})} "
            f"test(s) (limits: {' '.join(e.text for e in state.fail_exprs)})",
            red=True,
        )
    elif not comparison.failed:
        tr.write_line(f"no GPU regressions against {where}: {len(comparison.compared)} tests compared"
                      + _floored(comparison))
    for line in coverage_lines(comparison):
        for part in wrap(line.text, terminal.width):
            tr.write_line(part, red=line.failed, yellow=not line.failed)
    for note in state.gate_notes:  # prose: wrapped to the terminal
        for line in wrap(note, terminal.width):
            tr.write_line(line)


#: flagged tests explained under the regression table (all with -v; every one in gpu_util.json)
EXPLAINED_TESTS = 10


def _floored(comparison: Any) -> str:
    """`` (N changes under the 1 ms noise floor)`` when some limits were passed by noise only."""
    from pytest_gpuutil.gates.noise_floor import FLOOR_MS

    n = len({(r.test, r.metric) for r in comparison.below_floor})
    return f" ({n} change(s) past a limit but under the {FLOOR_MS:g} ms noise floor)" if n else ""


def write_explanations(state: RunState, tr: Any, terminal: Terminal = Terminal()) -> None:
    """Up to 4 lines per flagged test under the regression table: what changed in its GPU work."""
    explanations = list((getattr(state, "explanations", None) or {}).values())
    shown = explanations if terminal.verbose else explanations[:EXPLAINED_TESTS]
    for explanation in shown:
        for line in explanation.terminal_lines(terminal.width):
            tr.write_line(line)
    if len(shown) < len(explanations):
        tr.write_line(f"(why {len(explanations) - len(shown)} more tests regressed: gpu_util.json's explanations, or -v)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def display_path(path: Any, cwd: Any = None) -> str:
    """A path as the plugin prints it: relative under the working directory, absolute anywhere else."""
    base = os.path.abspath(cwd if cwd is not None else os.getcwd())
    target = os.path.abspath(os.path.join(base, os.fspath(path)))
    for root, full in ((base, target), (os.path.realpath(base), os.path.realpath(target))):
        if full == root:
            return "."
        if full.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(full, root)
    return target


def _github_step_summary(state: RunState) -> None:
    from pytest_gpuutil.report.ci import (
        append_step_summary,
        step_summary_markdown,
        step_summary_path,
    )

    path = step_summary_path()
    regressions = state.comparison.regressions if state.comparison else ()
    if path is None or not (state.settings.enabled or regressions):  # a gate from the ini file runs unmeasured
        return
    try:
        append_step_summary(path, step_summary_markdown(state.records, regressions, totals_line(state), state.settings.top,
                                                        getattr(state, "explanations", None)))  # 0 = all
    except OSError:
        pass
