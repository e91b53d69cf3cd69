"""gpu_util.json's tests array indented in C (rundoc/_indent.c) against msgspec formatting the whole
document, and the spool's records encoded a batch at a time (session/run_files.encoded_records)
against each record's own dict."""
from __future__ import annotations

import random
import types
from collections import OrderedDict
from pathlib import Path

import msgspec
import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc import document
from pytest_gpuutil.rundoc.document import json_bytes, run_document
from pytest_gpuutil.session.run_files import encoded_records

indent = pytest.importorskip("pytest_gpuutil.rundoc._indent", reason="the C part is not built here")

#: strings that JSON escapes or that look like structure
TEXTS = ["", "a", 'q"uote', "back\\slash", "\\", '\\"', "{[,:]}", "new\nline\ttab\r", "\x00\x1f", "é ü 漢字 🙂",
         " spaced ", '"', "\\\\", '",":"']


def _value(rng: random.Random, depth: int):
    kind = rng.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-10**20, 10**20)
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e300, 2.5e-8, rng.uniform(-1e6, 1e6), float(rng.randint(0, 9))])
    if kind == 3:
        return rng.choice(TEXTS) + rng.choice(TEXTS)
    if kind == 4:  # long runs between escapes: the C part reads strings eight bytes at a time
        return "".join(rng.choice('ab"\\\n漢é,') if rng.random() < 0.1 else "x" for _ in range(rng.randrange(40)))
    if kind in (5, 6):
        return {rng.choice(TEXTS) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def _whole(doc) -> bytes:
    """What json_bytes wrote before the C part: msgspec formats the whole document."""
    return msgspec.json.format(msgspec.json.encode(doc, enc_hook=str), indent=1) + b"\n"


@pytest.mark.parametrize("seed", range(60))
def test_the_tests_array_indented_in_c_is_msgspecs_format_of_the_whole_document(seed: int) -> None:
    rng = random.Random(seed)
    tests = [_value(rng, 1) for _ in range(rng.randrange(1, 8))]
    tests = [t if rng.random() < 0.5 else msgspec.Raw(msgspec.json.encode(t)) for t in tests]
    doc = {"format": "pytest-gpuutil", "machine_info": {"tests": [1, {"tests": []}], "x": _value(rng, 2)},
           "tests": tests, "after": {"tests": "[]"}}
    assert json_bytes(doc) == _whole(doc)


def test_an_item_that_is_not_balanced_json_falls_back_to_msgspec_and_its_error() -> None:
    for bad in (b'{"a":1', b'"open', b"[1]]", b'{"a":"\\"}', b"", b"  "):
        with pytest.raises(ValueError, match="balanced"):
            indent.array([bad], 1)
        doc = {"tests": [msgspec.Raw(bad)]}
        if bad.strip():
            with pytest.raises(msgspec.DecodeError):
                json_bytes(doc)
        else:  # no value at all: msgspec's own answer
            assert json_bytes(doc) == _whole(doc)
    assert indent.array([], 3) == b"[]" and indent.array([b"1", b"[ ]", b"{ }"], 0) == b"[\n 1,\n [],\n {}\n]"


def test_a_run_document_is_the_same_bytes_with_and_without_the_c_part(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [TestRecord(f"t.py::t[{i}]", "passed", busy_pct=1.5 * i, kernels=(("k", 2, 3.5),), devices=("0",),
                          categories={"gemm": {"time_us": 1.0}}, findings=()) for i in range(5)]
    encoded = {id(r): msgspec.json.encode(r.to_dict()) for r in records[:3]}  # the spool's, for some

    def as_json(record: TestRecord):
        found = encoded.get(id(record))
        return record.to_dict() if found is None else msgspec.Raw(found)

    doc = run_document(records, {"gpu_model": "X"}, "now", as_dict=as_json, findings_summary={"tests": 0})
    with_c = json_bytes(doc)
    monkeypatch.setattr(document, "_INDENT", None)
    assert json_bytes(doc) == with_c == _whole(doc)
    assert json_bytes({**doc, "tests": []}) == _whole({**doc, "tests": []})


def _records() -> list[TestRecord]:
    proxy = types.MappingProxyType
    plain = [TestRecord(f"t::{i}", "passed", busy_pct=3.5, top_kernels=({"name": "k", "count": 2},),
                        kernels=(("k", 2, 3.5), ("(other kernels)", 1, 0.1)), categories={"gemm": {"time_us": 1.0}},
                        devices=("0",), findings=() if i % 2 else None) for i in range(4)]
    found = TestRecord("t::f", "failed", findings=({"rule": "gpu-idle", "evidence": {"idle_pct": 90.0}}, {"rule": "x"}))
    odd = TestRecord("t::b", "failed", categories=proxy({"gemm": proxy({"time_us": 1.0})}),
                     kernel_bench={"x": proxy({"mean": 1.0})}, gpu_trace={"g": {"n": (1, 2)}},
                     idle_gaps=({"device": "0"}, proxy({"device": "1"})), processes=(proxy({"pid": 1}),),
                     findings=({"rule": "gpu-idle", "evidence": proxy({"idle_pct": 90.0})},))
    listed = TestRecord("t::k", "passed", kernels=(["k", 2, 3.5],))  # a row that is a list
    ordered = TestRecord("t::o", "passed", categories=OrderedDict(gemm=OrderedDict(time_us=1.0)),
                         gpu_trace={"g": {"file": Path("a/b"), "inner": proxy({"n": 1})}})  # str, and str() of a proxy
    paired = TestRecord("t::p", "passed", idle_gaps=([("device", "0")],))  # an item that is not a mapping
    return [*plain, found, odd, listed, ordered, paired]


@pytest.mark.parametrize("batch", [slice(0, 4), slice(0, 5), slice(0, 6), slice(4, 8), slice(6, 8), slice(0, 0),
                                   slice(8, 9), slice(0, 10), slice(9, 10)])
def test_a_batchs_encoded_records_are_each_records_to_dict_encoded(batch: slice) -> None:
    records = _records()[batch]
    assert encoded_records(records) == [msgspec.json.encode(r.to_dict(), enc_hook=str) for r in records]
