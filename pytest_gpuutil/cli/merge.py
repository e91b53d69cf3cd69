"""``gpuutil merge A.json B.json ... -o OUT.json``: CI shards (each a gpu_util.json) into one run.

Exit status: 0 written, 2 bad input (a missing or corrupt file, a test in two shards, an output
that cannot be written), reported as one ``error: <file>: <problem>`` line on stderr. Shards from
different machines merge (a warning says which fields differ; each record names its machine).

The shards' timelines (``timelines.json.gz`` beside each run file, written with ``--gpu-util-html``)
are merged too, into ``timelines.json.gz`` beside the output, so that ``gpuutil report`` draws them
on the merged page; a shard's unreadable timelines file is a warning, and its tests go without.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence, TextIO

from pytest_gpuutil.cli.arguments import EXIT_OK, EXIT_USAGE, Parser, parse_or_exit_code
from pytest_gpuutil.history.merge import PER_SHARD_KEYS, merge_runs, read_shard
from pytest_gpuutil.report.files import atomic_write_bytes
from pytest_gpuutil.report.timelines import SIDECAR, read_sidecar, write_sidecar
from pytest_gpuutil.rundoc.document import RunDocError, json_bytes

PROG = "gpuutil merge"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Merge gpu_util.json runs (CI shards) into one run, with the "
                                           "timelines.json.gz beside each; each test may come from one shard only.",
                    epilog="Exit status: 0 written, 2 bad input.")
    parser.add_argument("runs", nargs="+", metavar="RUN.json", help="gpu_util.json files of the shards")
    parser.add_argument("-o", "--output", metavar="OUT.json", required=True, help="the merged run file to write")
    return parser


def _differences(shards: Sequence) -> list[str]:
    """machine_info keys whose values differ between the shards' records' machines."""
    infos = [s.machine_of(r) for s in shards for r in s.run.records.values()] or [s.run.machine_info for s in shards]
    keys = sorted({k for info in infos for k in info if k not in PER_SHARD_KEYS})
    return [k for k in keys if len({repr(info.get(k)) for info in infos}) > 1]


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``gpuutil merge``; returns the exit status (0 or 2)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args = parse_or_exit_code(build_parser().parse_args, sys.argv[1:] if argv is None else argv, err)
    if isinstance(args, int):
        return args
    try:
        shards = [read_shard(path) for path in args.runs]
        doc = merge_runs(shards)
    except RunDocError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    timelines, problems = _timelines(shards)
    target = Path(args.output)
    try:
        atomic_write_bytes(target, json_bytes(doc))
    except OSError as exc:
        print(f"error: {target}: cannot write: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    for problem in problems:
        print(f"warning: {problem}", file=err)
    try:
        write_sidecar(target.parent, timelines)
    except OSError as exc:
        print(f"warning: {target.parent / SIDECAR}: cannot write the timelines: {exc.strerror or exc}", file=err)
        timelines = {}
    machines = doc.get("machines") or {}
    if machines:
        print(f"warning: the shards ran on {len(machines)} machines (they differ in {', '.join(_differences(shards))}): "
              f"each record names its own ({', '.join(machines)})", file=err)
    print(f"merged {len(shards)} runs into {target} ({len(doc['tests'])} tests"
          f"{f', {len(machines)} machines' if machines else ''}"
          f"{f', {len(timelines)} with a timeline' if timelines else ''})", file=out)
    return EXIT_OK


def _timelines(shards: Sequence) -> tuple[dict[str, dict], list[str]]:
    """Each shard's timelines of its own tests (shards in one folder share a timelines file), and
    what was wrong with the files that could not be read."""
    found: dict[str, dict] = {}
    problems: list[str] = []
    for shard in shards:
        timelines, problem = read_sidecar(shard.path, consequence="its tests are merged without their timelines")
        if problem and problem not in problems:
            problems.append(problem)
        found.update((test, timeline) for test, timeline in timelines.items() if test in shard.run.records)
    return found, problems


if __name__ == "__main__":
    sys.exit(main())
