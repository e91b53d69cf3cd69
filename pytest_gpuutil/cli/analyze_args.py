"""``gpuutil analyze``'s command line: one table of options, read by argparse or, for plain command lines, here.

Building an argparse parser loads its help formatter (``shutil``, and with it ``bz2`` and ``lzma``)
and its messages (``gettext``, ``locale``): ~5 ms of a ~130 ms run (issue 44). A command line made
only of options spelt out in full (``--format json``, ``--format=json``), values that do not start
with ``-`` and one run of traces is read here, to what argparse would give; anything else (``--help``,
an abbreviation, ``--``, a bad value, a missing trace) goes to argparse, which says what it says.
"""
from __future__ import annotations

from types import SimpleNamespace

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

#: every option: its flag and what argparse's ``add_argument`` takes for it (``dest``: the flag's words)
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--format", {"choices": ("table", "json", "csv"), "default": "table"}),
    ("--top", {"type": int, "default": 10, "help": "kernels listed per trace (default 10)"}),
    ("--rule", {"action": "append", "default": [], "metavar": "CATEGORY=REGEX",
                "help": "a kernel rule tried before the built-in ones (repeatable; first match wins)"}),
    ("--findings", {"choices": ("on", "off"), "default": "on", "help": "say what to fix in each trace (default on)"}),
    ("--findings-ignore", {"default": "", "metavar": "RULE,RULE", "help": "findings rules to leave out"}),
    ("--findings-floor", {"default": "", "metavar": "MSms,PCT%",
                          "help": "report a finding only when its fix would save at least MS and PCT%% of the trace's "
                                  "window (default 1ms,2%%; 0: all), as --gpu-util-findings-floor"}),
    ("--html", {"default": None, "metavar": "OUT.html",
                "help": "also write the HTML report: a row per trace, its GPU timeline in its detail view"}),
    ("--timeline-gap", {"type": float, "default": 0.1, "metavar": "MS",
                        "help": "with --html: the shortest idle gap a timeline shades and labels (default 0.1 ms)"}),
)
_BY_FLAG = dict(OPTIONS)


def analyze_parser() -> Any:
    """The argparse parser of ``gpuutil analyze`` (its ``--help`` and its errors)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="gpuutil analyze",
        description="GPU busy %, kernel categories and top kernels of torch.profiler traces "
        "(Chrome/Kineto JSON, .json or .json.gz).",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE")
    for flag, spec in OPTIONS:
        parser.add_argument(flag, **spec)
    return parser


def parse_analyze_args(argv: Sequence[str]) -> Any:
    """The arguments of ``gpuutil analyze`` (argparse's errors and help exit as argparse's do)."""
    quick = read_plain(argv)
    return quick if quick is not None else analyze_parser().parse_args(argv)


def read_plain(argv: Sequence[str]) -> Optional[SimpleNamespace]:
    """What argparse would make of a plain command line (see the module's docstring), or None for argparse."""
    values: dict[str, Any] = {flag[2:].replace("-", "_"): spec["default"] for flag, spec in OPTIONS}
    values["rule"] = []
    traces: list[str] = []
    previous_was_option = False
    runs = 0  # runs of traces: argparse takes only the first (the rest are unrecognized arguments)
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            runs += not traces or previous_was_option
            traces.append(word)
            previous_was_option = False
            continue
        flag, equals, value = word.partition("=")
        spec = _BY_FLAG.get(flag)
        if spec is None or (equals and not value):
            return None
        if not equals:
            value = next(words, None)
            if value is None or value.startswith("-"):
                return None
        try:
            value = spec.get("type", str)(value)
        except ValueError:
            return None
        if value not in spec.get("choices", (value,)):
            return None
        dest = flag[2:].replace("-", "_")
        if spec.get("action") == "append":
            values[dest].append(value)
        else:
            values[dest] = value
        previous_was_option = True
    if not traces or runs != 1:
        return None
    return SimpleNamespace(traces=traces, **values)
