"""gpuutil analyze's command line: the quick reader gives what argparse gives, or leaves the line to argparse."""
from __future__ import annotations

import random

import pytest

from pytest_gpuutil.cli.analyze_args import OPTIONS, analyze_parser, read_plain


class ParseError(Exception):
    pass


def by_argparse(argv: list[str]) -> dict:
    """argparse's reading of ``argv`` as a dict, or ParseError where it would print an error or the help."""
    parser = analyze_parser()

    def error(message: str) -> None:
        raise ParseError(message)

    parser.error = error
    parser.exit = error
    return vars(parser.parse_args(argv))


PLAIN = [
    ["t.json"],
    ["t.json", "--format", "json"],
    ["--format", "json", "t.json"],
    ["a.json", "b.json.gz", "--format=csv", "--top", "3"],
    ["t.json", "--rule", "gemm=foo", "--rule=attention=bar", "--findings", "off"],
    ["--findings-ignore", "gpu-idle,host-sync", "--findings-floor", "0", "t.json"],
    ["--html", "out.html", "--timeline-gap", "0.5", "t.json", "u.json"],
    ["t.json", "--top", "5", "--top", "7", "--format", "table", "--format", "json"],
    ["t.json", "--findings-ignore", ""],
    ["", "--top", "+5"],
    ["t.json", "--timeline-gap", "1e-3", "--top", "0"],
]
LEFT_TO_ARGPARSE = [
    [], ["--help"], ["-h"], ["t.json", "--help"], ["--format", "json"], ["t.json", "--form", "json"],
    ["t.json", "--format", "xml"], ["t.json", "--top", "x"], ["t.json", "--top", "-1"], ["t.json", "--top"],
    ["t.json", "--format="], ["a.json", "--top", "3", "b.json"], ["--", "t.json"], ["-"], ["t.json", "-x"],
    ["t.json", "--html", "--format"], ["t.json", "--findings", "maybe"],
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_command_line_is_read_as_argparse_reads_it(argv):
    quick = read_plain(argv)
    assert quick is not None
    assert vars(quick) == by_argparse(argv)


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE, ids=" ".join)
def test_help_abbreviations_and_bad_lines_are_left_to_argparse(argv):
    assert read_plain(argv) is None


def test_random_command_lines_are_read_as_argparse_reads_them_or_left_to_it():
    """Wherever the quick reader answers, argparse answers the same (and does not fail)."""
    words = ["t.json", "u.json", "", "-", "--", "-h", "--top", "3", "-3", "x", "--top=4", "--format", "json", "csv",
             "--format=table", "--form", "--rule", "gemm=a", "--rule=b=c", "--findings", "off", "--findings=on",
             "--findings-ignore", "gpu-idle", "--findings-floor", "1ms,2%", "--html", "o.html", "--timeline-gap",
             "0.2", "--timeline-gap=nan", "--top=", "--html=", *(flag for flag, _ in OPTIONS)]
    rng = random.Random(44)
    answered = 0
    for _ in range(3000):
        argv = [rng.choice(words) for _ in range(rng.randint(0, 7))]
        quick = read_plain(argv)
        if quick is None:
            continue
        answered += 1
        assert repr(vars(quick)) == repr(by_argparse(argv)), argv  # repr: nan is not equal to itself
    assert answered > 100
