"""Per-test records through JSON: the lists of top kernels and idle gaps survive, old files still read."""
from __future__ import annotations

import json

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord

KERNELS = ({"name": "nvjet_sm90_tst_256x128", "category": "gemm", "count": 2, "total_us": 400.0, "pct_of_window": 40.0},
           {"name": "vectorized_elementwise_kernel", "category": "elementwise", "count": 1, "total_us": 50.0,
            "pct_of_window": 5.0})
GAPS = ({"device": "0", "start_us": 450.0, "dur_us": 550.0},)


def test_top_kernels_and_idle_gaps_go_through_json_and_back() -> None:
    record = TestRecord("t.py::test_a", "passed", gpu_busy_ms=0.45, top_kernel=KERNELS[0]["name"],
                        top_kernels=KERNELS, idle_gaps=GAPS)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["top_kernels"] == list(KERNELS) and data["idle_gaps"] == list(GAPS)
    assert TestRecord.from_dict(data) == record


def test_a_record_written_before_them_reads_with_none() -> None:
    old = {"test": "t.py::test_a", "outcome": "passed", "top_kernel": "k", "devices": ["0"]}
    record = TestRecord.from_dict(old)
    assert (record.top_kernels, record.idle_gaps, record.top_kernel) == ((), (), "k")


def test_items_that_are_not_objects_are_left_out() -> None:
    record = TestRecord.from_dict({"test": "t", "outcome": "passed", "top_kernels": [KERNELS[0], 3, "k"],
                                   "idle_gaps": None})
    assert record.top_kernels == (KERNELS[0],) and record.idle_gaps == ()


def test_the_csv_keeps_one_scalar_per_column() -> None:
    assert "top_kernels" not in CSV_COLUMNS and "idle_gaps" not in CSV_COLUMNS
    row = TestRecord("t", "passed", top_kernels=KERNELS).csv_row()
    assert set(row) == set(CSV_COLUMNS)


FINDINGS = ({"rule": "host-sync", "severity": "high", "message": "the host waited 100 times", "fix": "drop .item()",
             "impact_pct": 52.5, "evidence": {"waits": 100, "by_name": {"cudaStreamSynchronize": 100}}},
            {"rule": "gpu-idle", "severity": "low", "message": "m", "fix": "f", "impact_pct": 10.0, "evidence": {}})


def test_findings_go_through_json_and_back_and_into_the_csv() -> None:
    record = TestRecord("t.py::test_a", "passed", findings=FINDINGS)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["findings"] == list(FINDINGS)
    assert TestRecord.from_dict(data) == record and record.finding_rules == ("host-sync", "gpu-idle")
    assert record.csv_row()["findings"] == "host-sync gpu-idle"
    # the columns older files had keep their places: findings after worker, the hardware counters after it
    assert CSV_COLUMNS[CSV_COLUMNS.index("worker") + 1] == "findings" and CSV_COLUMNS[-1] == "counters_note"


def test_findings_not_looked_for_stay_apart_from_none_found() -> None:
    assert TestRecord.from_dict({"test": "t", "outcome": "passed"}).findings is None  # a file from before findings
    assert TestRecord.from_dict({"test": "t", "outcome": "passed", "findings": []}).findings == ()
    assert TestRecord.from_dict({"test": "t", "outcome": "passed", "findings": "x"}).findings is None
    assert TestRecord.from_dict({"test": "t", "outcome": "passed", "findings": [FINDINGS[0], 3]}).findings == FINDINGS[:1]
    assert json.loads(json.dumps(TestRecord("t", "passed").to_dict()))["findings"] is None
    assert TestRecord("t", "passed").csv_row()["findings"] == ""


def test_child_process_counts_say_where_the_work_was() -> None:
    from pytest_gpuutil.records import child_process_counts

    parent = {"pid": 1, "program": "pytest", "gpu_ms": 2.0, "parent": True}
    kid = {"pid": 2, "program": "python x.py", "gpu_ms": 5.0, "parent": False}
    unmeasured = {"pid": 3, "program": "cuda_prog", "gpu_ms": 0.0, "parent": False, "note": "not measured"}
    records = [
        TestRecord("only_kids", "passed", gpu_busy_ms=5.0, kernel_count=3, processes=(kid,)),
        TestRecord("both", "passed", gpu_busy_ms=7.0, kernel_count=4, processes=(parent, kid)),
        TestRecord("unmeasured_kid", "passed", gpu_busy_ms=0.0, kernel_count=0, processes=(unmeasured,)),
        TestRecord("own_work", "passed", gpu_busy_ms=1.0, kernel_count=1),
        TestRecord("idle", "passed", gpu_busy_ms=0.0, kernel_count=0),
    ]
    assert child_process_counts(records) == {"with_child_processes": 3, "with_gpu_work_only_in_children": 1,
                                             "child_work_not_measured": 1}
    again = TestRecord.from_dict(records[1].to_dict())
    assert again.processes == (parent, kid) and TestRecord.from_dict({"test": "old", "outcome": "passed"}).processes == ()


def test_a_records_dict_has_every_field_in_order_and_copies_its_mappings() -> None:
    import dataclasses
    from types import MappingProxyType

    categories = {"gemm": {"time_us": 5.0}}
    record = dataclasses.replace(TestRecord("t", "passed", categories=categories),
                                 kernel_bench=MappingProxyType({"mm": MappingProxyType({"median_ms": 1.0})}))
    data = record.to_dict()
    assert list(data) == [f.name for f in dataclasses.fields(TestRecord)]
    assert data["kernel_bench"] == {"mm": {"median_ms": 1.0}} and type(data["kernel_bench"]["mm"]) is dict
    data["categories"]["gemm"]["time_us"] = 0.0  # the dict is the caller's: the record keeps its own
    assert record.categories["gemm"]["time_us"] == 5.0
    json.dumps(data)


def test_json_dict_encodes_as_to_dict_with_mappings_that_are_not_dicts() -> None:
    import types

    import msgspec

    proxy = types.MappingProxyType
    plain = TestRecord("t::a", "passed", busy_pct=3.5, top_kernels=({"name": "k", "count": 2},), kernels=(("k", 2, 3.5),),
                       categories={"gemm": {"time_us": 1.0}}, devices=("0",), findings=())
    odd = TestRecord("t::b", "failed", categories=proxy({"gemm": proxy({"time_us": 1.0})}),
                     kernel_bench={"x": proxy({"mean": 1.0})}, gpu_trace={"g": {"n": (1, 2)}},
                     idle_gaps=({"device": "0"}, proxy({"device": "1"})), processes=(proxy({"pid": 1}),),
                     findings=({"rule": "gpu-idle", "evidence": proxy({"idle_pct": 90.0})},))
    for record in (plain, odd):
        assert msgspec.json.encode(record.json_dict(), enc_hook=str) == msgspec.json.encode(record.to_dict(), enc_hook=str)
    assert b"mappingproxy" not in msgspec.json.encode(odd.json_dict(), enc_hook=str)


def test_a_record_made_without_its_init_is_the_dataclass_record() -> None:
    import dataclasses
    import pickle

    import pytest

    from pytest_gpuutil.records import new_record, record_fields, record_from

    fields = {"wall_ms": 1.5, "kernels": (("k", 2, 3.0),), "categories": {"gemm": {"time_us": 1.0}}, "findings": ()}
    made, plain = new_record("t::a", "passed", **fields), TestRecord("t::a", "passed", **fields)
    assert made == plain and list(made.__dict__) == list(plain.__dict__) and made.to_dict() == plain.to_dict()
    assert repr(made) == repr(plain) and pickle.loads(pickle.dumps(made)) == plain
    assert dataclasses.replace(made, note="n").note == "n" and made.note == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.note = "x"  # type: ignore[misc]
    one, two = record_from(record_fields("a", "b")), record_from(record_fields("a", "b"))
    assert one.kernel_bench == {} and one.kernel_bench is not two.kernel_bench  # each factory's dict its own
    with pytest.raises(TypeError, match="no field 'busy'"):
        new_record("t", "passed", busy=1.0)
    with pytest.raises(TypeError):  # as TestRecord(**data) says it
        TestRecord.from_dict({"outcome": "passed"})
    assert TestRecord.from_dict(plain.to_dict()) == plain


def _typed(value):
    """A value with its types and its dicts' key order spelled out (so two records compare exactly)."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


def test_a_records_rows_are_the_same_dicts_with_the_c_part_and_without(monkeypatch) -> None:
    """record_builder's rows as dicts (gates/_record_parts.c where built, else comprehensions): the same
    records, key order and types included, for rows of every length, a category twice (the later row's
    values in the first one's place), and rows of another shape (the comprehension's own error)."""
    import random
    from types import SimpleNamespace

    import pytest

    from pytest_gpuutil.session import record_builder

    rng = random.Random(7)

    def stats(n_kernels, n_gaps, categories):
        kernels = tuple((f"k{i}", "gemm", i + 1, 2.5 * i, 1.25, rng.random() * 100) for i in range(n_kernels))
        return SimpleNamespace(
            busy_us=12.5, busy_pct=rng.random() * 100, mm_conv_pct=1.0, kernel_count=n_kernels, devices=(("0", 12.5),),
            category_rows=tuple((name, rng.random(), rng.random(), rng.random(), rng.randint(1, 9)) for name in categories),
            kernel_rows=kernels, gap_rows=tuple((str(i % 2), rng.random(), rng.random()) for i in range(n_gaps)),
            kernel_totals=tuple((name, count, total) for name, _, count, total, _, _ in kernels))

    def inputs(shapes):
        return [(f"t::{i}", "passed", SimpleNamespace(stats=s, counters=None, wall_ms=1.0, measure_ms=0.1, findings=None,
                                                     note="", processes=()), SimpleNamespace(kernel_bench={}, gpu_trace={}),
                 None) for i, s in enumerate(shapes)]

    shapes = [stats(0, 0, ()), stats(1, 1, ("gemm",)), stats(5, 3, ("gemm", "attention", "memcpy")),
              stats(3, 2, ("gemm", "elementwise", "gemm"))]
    options = dict(worker="", physical_id=str, unmeasured_note="")
    if record_builder._dicts is None:
        pytest.skip("gates/_record_parts.c is not built here")
    with_c = [_typed(r.__dict__) for r in record_builder.build_records(inputs(shapes), **options)]
    assert record_builder.build_records(inputs(shapes[3:]), **options)[0].categories["gemm"]["count"] == \
        shapes[3].category_rows[2][4]
    monkeypatch.setattr(record_builder, "_dicts", None)
    monkeypatch.setattr(record_builder, "_keyed", None)
    assert [_typed(r.__dict__) for r in record_builder.build_records(inputs(shapes), **options)] == with_c
    monkeypatch.undo()
    odd = stats(2, 1, ("gemm",))
    odd.kernel_rows = odd.kernel_rows[:1] + (odd.kernel_rows[1][:5],)  # a row of five: the comprehension's ValueError
    with pytest.raises(ValueError):
        record_builder.build_records(inputs([odd]), **options)
    listed = stats(2, 2, ("gemm",))
    listed.gap_rows = [list(row) for row in listed.gap_rows]  # lists, not tuples: the comprehension takes them
    assert record_builder.build_records(inputs([listed]), **options)[0].idle_gaps[1]["device"] == "1"


def test_the_spools_list_field_check_in_c_answers_as_the_python() -> None:
    """gates/_record_parts.c's dict_items_only: records._dict_items_only's answer (or None, to ask it)
    for plain records, a record of another type, a list field with a mapping that is not a dict, one
    that is a list, one that is not a tuple or a list; json_dicts gives the same dicts with it."""
    from types import MappingProxyType

    import msgspec
    import pytest

    from pytest_gpuutil.records import LIST_FIELDS, _dict_items_only, json_dicts

    parts = pytest.importorskip("pytest_gpuutil.gates._record_parts", reason="the C part is not built here")

    class Sub(TestRecord):
        pass

    plain = [TestRecord("t::a", "passed", top_kernels=({"name": "k"},), idle_gaps=({"device": "0"},)),
             TestRecord("t::b", "passed")]
    batches = {
        "plain": plain, "empty": [], "tuple": tuple(plain),
        "subclass": plain + [Sub("t::c", "passed")],
        "proxy": plain + [TestRecord("t::c", "passed", processes=(MappingProxyType({"pid": 1}),))],
        "list": plain + [TestRecord("t::c", "passed", below_floor=[{"rule": "r"}])],  # type: ignore[arg-type]
        "generator": plain + [TestRecord("t::c", "passed", idle_gaps=iter(({"device": "0"},)))],  # type: ignore[arg-type]
    }
    said = {name: parts.dict_items_only(batch, TestRecord, LIST_FIELDS) for name, batch in batches.items()}
    assert said == {"plain": True, "empty": True, "tuple": True, "subclass": False, "proxy": False, "list": True,
                    "generator": None}
    for name, batch in batches.items():
        if said[name] is not None:
            assert said[name] == _dict_items_only(batch), name
    for name in ("plain", "subclass", "proxy", "list"):
        batch = batches[name]
        encode = msgspec.json.encode
        assert ([encode(d, enc_hook=str) for d in json_dicts(batch, parts.dict_items_only)]
                == [encode(d, enc_hook=str) for d in json_dicts(batch)]), name
