"""(CPU, deterministic) Instructions a record costs on its way to the files: built, spooled, in the CSV and JSON.

    python benchmarks/parts/records_path_cost.py capture INPUTS.pkl [--tests 2000]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python benchmarks/parts/records_path_cost.py measure ROOT PARTS INPUTS.pkl [--tests 2000]

``capture`` runs cost_line_check.py's synthetic suite (the tests' synthetic GPU) in this process with
this checkout's plugin and pickles what each test's record is built from (nodeid, outcome, profile,
results, memory). ``measure`` loads them with ROOT's ``pytest_gpuutil`` (a checkout: ``git archive
COMMIT | tar -x -C DIR``) and does PARTS of the records' path: ``none`` (only loading), ``build``
(the records, as ROOT builds a flush's), ``spool`` (each record's spool line: json_dict, encoded),
``csv`` and ``json`` (gpu_util.csv's text, gpu_util.json's bytes from the spooled lines). Under
callgrind, PARTS minus ``none`` over the tests is the instructions a record of that part costs;
a count, not a time, so runs on a loaded machine compare.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def capture(out: Path, tests: int) -> None:
    sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "benchmarks" / "checks")]  # cost_line_check's folder
    import pytest
    from cost_line_check import SYNTHETIC_TESTS

    import pytest_gpuutil.session.state as state
    from tests.helpers import SYNTHETIC_CONFTEST

    got: list = []
    build = state.build_records

    def kept(inputs, **options):
        got.extend(inputs)
        return build(inputs, **options)

    state.build_records = kept
    with tempfile.TemporaryDirectory(prefix="records_path_") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text("import torch  # noqa: F401\n" + SYNTHETIC_CONFTEST)
        (folder / "test_small.py").write_text(SYNTHETIC_TESTS.replace("{tests}", str(tests)))
        os.chdir(folder)
        pytest.main(["-q", "-p", "no:cacheprovider", "test_small.py", "--gpu-util", f"--gpu-util-dir={folder / 'out'}"])
    out.write_bytes(pickle.dumps(got))
    print(f"captured {len(got)} tests' record inputs in {out}")


def measure(root: Path, parts: set[str], inputs_path: Path, tests: int) -> None:
    sys.path.insert(0, str(root))
    import msgspec

    from pytest_gpuutil.report.files import records_csv
    from pytest_gpuutil.rundoc.document import json_bytes, run_document
    from pytest_gpuutil.session import record_builder

    inputs = pickle.loads(inputs_path.read_bytes())[:tests]
    options = dict(worker="", physical_id=str, unmeasured_note="", findings_ignore=frozenset(), findings_floor=None)
    records: list = []
    if "build" in parts:
        if hasattr(record_builder, "build_records"):
            records = record_builder.build_records(inputs, **options)
        else:
            records = [record_builder.build_record(*test, **options) for test in inputs]
    encoded = {}
    if "spool" in parts:
        encode = msgspec.json.encode
        encoded = {id(r): encode(r.json_dict(), enc_hook=str) for r in records}
    ordered = sorted(records, key=lambda r: r.test)
    if "csv" in parts:
        records_csv(ordered)
    if "json" in parts:
        json_bytes(run_document(ordered, {}, "now", as_dict=lambda r: msgspec.Raw(encoded[id(r)])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("capture")
    one.add_argument("inputs", type=Path)
    one.add_argument("--tests", type=int, default=2000)
    two = sub.add_parser("measure")
    two.add_argument("root", type=Path)
    two.add_argument("parts")
    two.add_argument("inputs", type=Path)
    two.add_argument("--tests", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.command == "capture":
        capture(args.inputs, args.tests)
    else:
        measure(args.root, set(args.parts.split(",")), args.inputs, args.tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
