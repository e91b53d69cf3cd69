"""Text tables: tables fitted to a terminal's width, names shortened to fit, and the CLI's tables of one trace.

A fitted table is described by its columns (``Column``: header, cell format, priority, narrowest
width); ``fit_table`` keeps the columns that fit the width, most important first, and shortens
the name columns (test ids, kernel names) in the middle so that rows stay apart; a test id
column's common start (``tests/test_models.py::``) is printed once, as the table's caption.
"""
from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Mapping

from pytest_gpuutil.analysis.summary import TraceSummary
from pytest_gpuutil.frozen import frozen

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence

#: Categories given a column of their own in the one-line summary (percent of window).
TABULATE_LINE_CATEGORIES = (
    "attention",
    "communication",
    "triton_pointwise",
    "triton_reduction",
    "triton_persistent_reduction",
    "triton_template",
    "other",
)
TABULATE_LINE_COLUMNS = (
    ("name", "busy %", "mm/conv %")
    + tuple(f"{c} %" for c in TABULATE_LINE_CATEGORIES)
    + ("window ms",)
)

# -- names shortened to a width -------------------------------------------------------------------
ELLIPSIS = "…"
#: what a test id keeps, at least, before another part gets more room (characters, with the ellipsis)
_PARAM_MIN = 12
_NAME_MIN = 12
_PATH_MIN = 12
#: a tile shape in a kernel name (``128x256x64``, ``256x128``): it tells apart kernels of one family
_TILE = re.compile(r"\d+x\d+(?:x\d+)*")


def shorten(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters, its head kept (the Markdown and HTML reports' cut)."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def keep_end(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, its end kept."""
    if len(text) <= width:
        return text
    return ELLIPSIS + text[len(text) - width + 1:] if width > 1 else ELLIPSIS[:width]


def keep_ends(text: str, width: int, head_share: float = 0.5) -> str:
    """``text`` cut to ``width`` characters in the middle, both ends kept (``head_share`` of them the head)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = min(width - 1, max(1, math.ceil((width - 1) * head_share)))
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail:] if tail else "")


def split_test_id(nodeid: str) -> tuple[str, str, str]:
    """A pytest node id as (file path, test name, parametrization id): ``a/b.py``, ``C::test_x``, ``[1-y]``."""
    path, sep, name = nodeid.partition("::")
    holder = name if sep else path
    param = ""
    if holder.endswith("]") and "[" in holder:
        cut = holder.index("[")
        holder, param = holder[:cut], holder[cut:]
    return (path, holder, param) if sep else (holder, "", param)


def shorten_test_id(nodeid: str, width: int) -> str:
    """A test id cut to ``width`` in its middle, so that rows of one file stay apart.

    Kept, in order: both ends of the parametrization id, the test name's start, the file name's
    end, then the whole parametrization id, more of the test name, and more of the path:
    ``…forward_backward.py::test_model_forw…[1-resnet50_gn_a1h_in1k]``.
    """
    if len(nodeid) <= width:
        return nodeid
    path, name, param = split_test_id(nodeid)
    sep = "::" if name else ""
    budget = width - len(sep)
    if budget < _PARAM_MIN + 4:
        return keep_ends(nodeid, width)
    sizes = {"param": 0, "name": 0, "path": 0}
    lengths = {"param": len(param), "name": len(name), "path": len(path)}
    for part, want in (("param", _PARAM_MIN), ("name", _NAME_MIN), ("path", _PATH_MIN),
                       ("param", len(param)), ("name", len(name)), ("path", len(path))):
        grant = max(0, min(want, lengths[part]) - sizes[part])
        grant = min(grant, budget)
        sizes[part] += grant
        budget -= grant
    if name and sizes["path"] < 4:  # too narrow for any of the path: the test name takes its room
        return shorten(name, sizes["name"] + sizes["path"] + len(sep)) + keep_ends(param, sizes["param"])
    return keep_end(path, sizes["path"]) + sep + shorten(name, sizes["name"]) + keep_ends(param, sizes["param"])


def common_prefix(ids: Sequence[str]) -> str:
    """The start shared by every test id that ends at a folder or node-id separator (``/``, ``::``),
    before any parametrization, with something of each id left after it: ``tests/test_models.py::``."""
    if not ids:
        return ""
    shared = os.path.commonprefix(list(ids))
    # a separator inside a parametrization id is not one: stop where the first id's parameters start
    ends = [len(path) + (2 if name else 0) + len(name) for path, name, _ in map(split_test_id, ids)]
    limit = min(len(shared), *ends)
    slash, colons = shared.rfind("/", 0, limit), shared.rfind("::", 0, limit)
    cut = max(slash + 1 if slash >= 0 else 0, colons + 2 if colons >= 0 else 0)
    return shared[:cut] if all(len(i) > cut for i in ids) else ""


def caption(prefix: str, width: int) -> str:
    """The line a table of test ids starts with when their common ``prefix`` was cut from its rows."""
    return keep_ends(f"tests in {prefix}", max(width, 20))


def shorten_test_ids(ids: Sequence[str], width: int) -> list[str]:
    """Each of a column's test ids cut to ``width``, keeping what tells it apart from the others.

    The words that every test name of the column starts or ends with (``test_model_`` of
    ``test_model_forward`` and ``test_model_backward``) are cut in their middle first; kept, in
    order: the words that differ, both ends of the parametrization id, the file name's end, then
    the rest: ``te…_backward[2-aimv2_large_patch14_224]``. Ids may lack the prefix the table's
    caption holds (``test_x[1]`` is a test name, not a file).
    """
    parts = [_id_parts(i) for i in ids]
    head, tail = _shared_words([name for _, name, _ in parts])
    return [_cut_parts(i, parts[n], head, tail, width) for n, i in enumerate(ids)]


def _id_parts(text: str) -> tuple[str, str, str]:
    """:func:`split_test_id`, where a text without ``::``, ``/`` or ``.py`` is a test name."""
    path, name, param = split_test_id(text)
    if not name and "/" not in path and ".py" not in path:
        return "", path, param
    return path, name, param


def _shared_words(names: Sequence[str]) -> tuple[int, int]:
    """How many characters every name starts and ends with, in whole words (split after ``_``); a
    name that all the tests have is shared whole: then the parametrization tells them apart."""
    distinct = sorted(set(names))
    if len(distinct) < 2:
        return (len(distinct[0]) if distinct else 0), 0
    words = [re.split(r"(?<=_)", n) for n in distinct]  # "test_model_x" -> ["test_", "model_", "x"]
    shortest = min(map(len, words))
    head = 0
    while head < shortest - 1 and len({w[head] for w in words}) == 1:
        head += 1
    tail = 0
    while head + tail < shortest - 1 and len({w[len(w) - 1 - tail] for w in words}) == 1:
        tail += 1
    first = words[0]
    return len("".join(first[:head])), len("".join(first[len(first) - tail:]))


def _cut_parts(nodeid: str, parts: tuple[str, str, str], head: int, tail: int, width: int) -> str:
    """One id of :func:`shorten_test_ids` at ``width``: its shared words (``head`` and ``tail``
    characters of its name) cut first."""
    if len(nodeid) <= width:
        return nodeid
    path, name, param = parts
    sep = "::" if name and path else ""
    budget = width - len(sep)
    if budget < _PARAM_MIN + 4:
        return keep_ends(nodeid, width)
    if head + tail > len(name):
        head, tail = len(name), 0
    pieces = {"head": name[:head], "core": name[head:len(name) - tail], "tail": name[len(name) - tail:],
              "param": param, "path": path}
    sizes = dict.fromkeys(pieces, 0)
    for part, want in (("head", 1), ("tail", 1), ("core", _NAME_MIN), ("param", _PARAM_MIN), ("core", None),
                       ("param", None), ("path", _PATH_MIN), ("head", None), ("tail", None), ("path", None)):
        length = len(pieces[part])
        grant = min(max(0, min(length if want is None else want, length) - sizes[part]), budget)
        sizes[part] += grant
        budget -= grant
    if path and sizes["path"] < 4:  # too narrow for any of the path: the name takes its room
        sizes["core"] += sizes["path"] + len(sep)
        path, sep, sizes["path"] = "", "", 0
        if sizes["core"] > len(pieces["core"]):  # more than the words that differ need: the shared ones get it
            sizes["head"] += sizes["core"] - len(pieces["core"])
            sizes["core"] = len(pieces["core"])
    text = {part: keep_ends(pieces[part], sizes[part]) for part in ("head", "core", "tail", "param")}
    return (keep_end(path, sizes["path"]) if path else "") + sep + text["head"] + text["core"] + text["tail"] + text["param"]


def shorten_kernel(name: str, width: int) -> str:
    """A kernel name cut to ``width``: its start, its tile shape and its end (what tells kernels apart).

    A demangled C++ name loses its leading ``void`` and its argument list (``(…)``) first.
    """
    if len(name) <= width:
        return name
    text = _without_arguments(name[5:] if name.startswith("void ") else name)
    if len(text) <= width:
        return text
    plain = keep_ends(text, width, head_share=2 / 3)
    tile = _TILE.search(text)
    if tile is None or width < 24 or tile.group() in plain:
        return plain
    rest = width - len(tile.group()) - 2
    head = math.ceil(rest * 2 / 3)
    tail = rest - head
    if tail < 1 or head >= tile.start() or len(text) - tail < tile.end():
        return plain
    return text[:head] + ELLIPSIS + tile.group() + ELLIPSIS + text[len(text) - tail:]


def _without_arguments(name: str) -> str:
    """``f<T>(int, float*)`` as ``f<T>(…)``: a demangled name's argument list rarely tells kernels apart."""
    if not name.endswith(")"):
        return name
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[index], 0)
        if depth == 0:
            return name[:index] + "(" + ELLIPSIS + ")" if index > 0 else name
    return name


# -- tables fitted to a width ---------------------------------------------------------------------
#: columns with a priority below this are shown whenever they fit with name columns at their
#: narrowest; the others only where name columns keep their fair width (or always, with -v)
OPTIONAL = 10
_GAP = "  "


@frozen
class Column:
    """One column of a fitted table: the row field it shows, how, and how much it matters."""

    name: str  # the row's attribute (or mapping key) shown
    header: str
    fmt: str = ""  # format spec for a number ("" = the value as text); numbers are right-aligned
    priority: int = 50  # lower comes first; below OPTIONAL: shown whenever it fits
    min_width: int = 0  # a name column's narrowest (0: never cut, as wide as its widest cell)
    fair_width: int = 0  # a name column's width kept before OPTIONAL columns come in
    cut: Optional[Callable[[str, int], str]] = None  # how a name column's too-long cell is cut
    align: str = "auto"  # "left", "right", or "auto": right for numbers (a fmt), left for text
    #: test ids: the start common to the rows is printed once, as the table's caption, and cut from
    #: them; too-long ids are cut together (shorten_test_ids), keeping what tells them apart
    test_ids: bool = False

    def text(self, row: Any) -> str:
        value = row.get(self.name) if isinstance(row, Mapping) else getattr(row, self.name, None)
        if value is None:
            return ""
        return format(value, self.fmt) if self.fmt else str(value)

    @property
    def right(self) -> bool:
        return self.align == "right" or (self.align == "auto" and bool(self.fmt))


def fit_table(columns: Sequence[Column], rows: Sequence[Any], width: int, every_column: bool = False) -> str:
    """``rows`` as a plain-text table at most ``width`` characters wide (unless ``every_column``).

    Columns are taken by priority while they fit (an optional one only when a row has a value for
    it); name columns are cut (``Column.cut``) to share what is left, the more important first. A
    ``test_ids`` column loses the start its rows share, which heads the table instead (caption).
    ``every_column`` (-v) shows them all, name columns at their narrowest where needed.
    """
    cells = {c.name: [c.text(r) for r in rows] for c in columns}
    ids = next((c for c in columns if c.test_ids and c.cut is not None), None)
    prefix = common_prefix(cells[ids.name]) if ids is not None else ""
    if prefix:
        cells[ids.name] = [text[len(prefix):] for text in cells[ids.name]]
    natural = {c.name: max([len(c.header), *map(len, cells[c.name])]) for c in columns}

    def narrowest(c: Column) -> int:
        return natural[c.name] if c.cut is None else min(natural[c.name], max(c.min_width, len(c.header)))

    def fair(c: Column) -> int:
        return natural[c.name] if c.cut is None else min(natural[c.name], max(c.fair_width, narrowest(c)))

    def total(chosen: Sequence[Column], size: Callable[[Column], int]) -> int:
        return sum(size(c) for c in chosen) + len(_GAP) * (len(chosen) - 1)

    ordered = sorted(columns, key=lambda c: c.priority)
    chosen: list[Column] = []
    for column in ordered:
        if column.priority >= OPTIONAL and not any(cells[column.name]):
            continue  # an optional column with nothing in it
        trial = chosen + [column]
        size = narrowest if column.priority < OPTIONAL else fair
        if not chosen or every_column or total(trial, size) <= width:
            chosen = trial
    widths = {c.name: narrowest(c) for c in chosen}
    room = width - total(chosen, narrowest)
    for column in chosen:  # name columns grow, the most important first, to their fair width, then further
        if column.cut is not None:
            grow = max(0, min(fair(column) - widths[column.name], room))
            widths[column.name] += grow
            room -= grow
    for column in chosen:
        if column.cut is not None:
            grow = max(0, min(natural[column.name] - widths[column.name], room))
            widths[column.name] += grow
            room -= grow
    shown = [c for c in columns if c in chosen]  # the table's own column order
    if ids is not None and ids in chosen and natural[ids.name] > widths[ids.name]:
        cells[ids.name] = shorten_test_ids(cells[ids.name], widths[ids.name])

    def line(texts: Sequence[str]) -> str:
        parts = []
        for column, text in zip(shown, texts):
            w = widths[column.name]
            if len(text) > w:
                text = column.cut(text, w) if column.cut is not None else text
            parts.append(text.rjust(w) if column.right else text.ljust(w))
        return _GAP.join(parts).rstrip()

    lines = [caption(prefix, width)] if prefix else []
    lines += [line([c.header for c in shown]), _GAP.join("-" * widths[c.name] for c in shown)]
    lines += [line([cells[c.name][i] for c in shown]) for i in range(len(rows))]
    return "\n".join(lines)


def wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """A line of prose as lines of at most ``width`` characters, broken after its clauses ("; ")
    where it can and between words otherwise (continuations indented; a path is never broken)."""
    width = max(width, 20)
    clauses = text.split("; ")
    pieces = [c + ";" for c in clauses[:-1]] + clauses[-1:]
    lines: list[str] = []
    for piece in pieces:
        current = lines[-1] if lines else ""
        if lines and len(current) + 1 + len(piece) <= width:
            lines[-1] = f"{current} {piece}"
            continue
        lead = indent if lines else ""
        lines += textwrap.wrap(piece, width=width, initial_indent=lead, subsequent_indent=indent,
                               break_long_words=False, break_on_hyphens=False) or [lead]
    return lines

# -- one trace's tables (gpuutil analyze --format table) ------------------------------------------
def simple_table(rows: Sequence[Sequence[Any]], headers: Sequence[str] = ()) -> str:
    """``tabulate(rows, headers, tablefmt="simple", disable_numparse=True)``, written here for rows of
    plain text and ints (tabulate for anything else): importing tabulate, which imports
    importlib.metadata (email, zipfile, socket, ...), cost ~175 M instructions, more than the rest of
    ``gpuutil analyze`` on a small trace."""
    cols = list(zip(*rows))
    if not rows or any(len(row) != len(cols) for row in rows) or (headers and len(headers) != len(cols)) \
            or not all(map(_plain_cell, headers)) or not all(_plain_cell(cell) for row in rows for cell in row):
        from tabulate import tabulate

        return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    texts = [[str(cell) for cell in col] for col in cols]
    widths = [max(map(len, col)) for col in texts]
    if headers:  # a header gets 2 spaces more than its text
        widths = [max(width, len(header) + 2) for width, header in zip(widths, headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()  # no numbers: all text

    rule = "  ".join("-" * width for width in widths).rstrip()
    body = [line(cells) for cells in zip(*texts)]
    return "\n".join([line(headers), rule, *body] if headers else [rule, *body, rule])


def _plain_cell(cell: Any) -> bool:
    """An int, or one line of text whose characters are each one column wide (whatever wcwidth says),
    without surrounding blanks or escape codes: what :func:`simple_table` lays out as tabulate would."""
    if type(cell) is int:
        return True
    return type(cell) is str and cell == cell.strip() and all(" " <= ch < "\x7f" or "\xa0" <= ch < "\u0300" for ch in cell)


def tabulate_line(label: str, summary: TraceSummary) -> str:
    """The ``Output for tabulate:`` line of torch/_inductor/wrapper_benchmark.py, for this trace."""
    cells = [label, f"{summary.busy_pct:.2f}%", f"{summary.mm_conv_pct:.2f}%"]
    cells += [f"{summary.category_pct_of_window(c):.2f}%" for c in TABULATE_LINE_CATEGORIES]
    cells.append(f"{summary.window_us / 1000:.3f}ms")
    return "Output for tabulate: " + ", ".join(cells)


def summary_table(summary: TraceSummary) -> str:
    rows = [
        ("window", f"{summary.window_us:,.3f} µs ({summary.window_source})"),
        ("devices with GPU work", f"{len(summary.devices)} (ids: {', '.join(d.device for d in summary.devices)})"
         if summary.devices else "none"),
        ("GPU busy", f"{summary.busy_us:,.3f} µs"),
        ("GPU busy %", f"{summary.busy_pct:.2f}"),
        ("mm/conv %", f"{summary.mm_conv_pct:.2f}"),
        ("kernels", f"{summary.kernel_count:,} (GPU events {summary.event_count:,})"),
    ]
    if summary.overlap is not None:
        o = summary.overlap
        rows.append(
            (
                "communication overlap",
                f"{o.overlap_us:,.3f} of {o.communication_us:,.3f} µs ({o.overlap_pct_of_communication:.1f}%)",
            )
        )
    return simple_table(rows)


def category_table(summary: TraceSummary) -> str:
    rows = [
        (c.name, f"{c.time_us:,.3f}", f"{c.share_of_busy:.2f}", f"{c.pct_of_window:.2f}", c.count)
        for c in summary.categories
    ]
    return simple_table(rows, headers=("category", "time µs", "% of busy", "% of window", "count"))


def kernel_table(summary: TraceSummary, width: int = 80) -> str:
    rows = [
        (shorten_kernel(k.name, width), k.category, k.count, f"{k.total_us:,.3f}", f"{k.mean_us:,.3f}", f"{k.pct_of_window:.2f}")
        for k in summary.top_kernels
    ]
    return simple_table(rows, headers=("kernel", "category", "count", "total µs", "mean µs", "% of window"))


def trace_report(summary: TraceSummary, label: str) -> str:
    """Everything the CLI prints for one trace."""
    parts: Sequence[str] = (
        f"== {summary.path}",
        summary_table(summary),
        "",
        category_table(summary) if summary.categories else "(no GPU work in the window)",
        "",
        kernel_table(summary) if summary.top_kernels else "",
    )
    text = "\n".join(p for p in parts)
    if summary.top_other:
        text += "\nunclassified ('other') kernels: " + "; ".join(
            f"{shorten_kernel(k.name, 60)} ({k.total_us:,.1f} µs)" for k in summary.top_other[:3]
        )
    return text + "\n" + tabulate_line(label, summary)

