"""pytest_gpuutil.frozen: records that behave as the frozen dataclasses they replace (and are ones when asked),
and named tuples as typing.NamedTuple makes them."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import types
from typing import Any, Mapping, NamedTuple, Optional

import pytest

from pytest_gpuutil.analysis.classify import Rule, rule
from pytest_gpuutil.analysis.finding_records import Finding, Floor, Glance, Limit
from pytest_gpuutil.analysis.finding_records import Rule as FindingRule
from pytest_gpuutil.analysis.findings import Fix
from pytest_gpuutil.analysis.intervals.waits import Waits
from pytest_gpuutil.analysis.stats import CategoryStat, DeviceStat, IdleGap, KernelStat, Overlap, StreamStat
from pytest_gpuutil.analysis.summary import TraceSummary
from pytest_gpuutil.analysis.window_facts import KeyTotals, Timeline
from pytest_gpuutil.frozen import field, frozen, replace, tuple_record
from pytest_gpuutil.traces.json_events import PlainEvent
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Trace, Window

RECORDS = (Rule, Finding, Fix, CategoryStat, DeviceStat, IdleGap, KernelStat, Overlap, StreamStat, TraceSummary,
           GpuColumns, SyncColumns, Trace, Window)


@frozen
class Sample:
    """A record with every kind of field."""

    name: str
    time_us: float
    evidence: Mapping[str, Any] = field(default_factory=dict)
    note: Optional[str] = field(default=None, compare=False, repr=False)
    count: int = 3


@dataclasses.dataclass(frozen=True)
class Twin:
    """The same record as a dataclass."""

    name: str
    time_us: float
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    note: Optional[str] = dataclasses.field(default=None, compare=False, repr=False)
    count: int = 3


def fields_of(cls: type) -> list[tuple[Any, ...]]:
    return [(f.name, f.type, f.default, f.default_factory, f.compare, f.repr, f.init, f.hash)
            for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_each_record_has_the_fields_a_frozen_dataclass_of_its_body_would(cls):
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen and cls.__dataclass_params__.eq
    names = [name for name in cls.__annotations__ if "ClassVar" not in str(cls.__annotations__[name])]
    assert [f.name for f in dataclasses.fields(cls)] == names
    assert list(inspect.signature(cls).parameters) == names


def test_a_record_is_built_compared_shown_and_hashed_as_its_dataclass_twin():
    for args, kwargs in [(("k", 1.5), {}), (("k", 1.5, {"a": 1}, "n", 4), {}), (("k",), {"time_us": 2.0, "count": 7}),
                         ((), {"name": "k", "time_us": 0.0, "note": "x"})]:
        ours, twin = Sample(*args, **kwargs), Twin(*args, **kwargs)
        assert repr(ours) == repr(twin).replace("Twin", "Sample")
        assert dataclasses.asdict(ours) == dataclasses.asdict(twin)
        assert ours.__dict__ == twin.__dict__
    assert Sample("k", 1.0, note="a") == Sample("k", 1.0, note="b")  # note is not compared
    assert Sample("k", 1.0) != Sample("k", 2.0) and Sample("k", 1.0) != Twin("k", 1.0)
    assert Sample("k", 1.0).evidence is not Sample("k", 1.0).evidence  # a fresh dict each
    assert hash(Window(1, 2, "x")) == hash(Window(1, 2, "x")) and len({Window(1, 2, "x"), Window(1, 2, "x")}) == 1
    assert Sample.__match_args__ == ("name", "time_us", "evidence", "note", "count")
    assert Sample.__match_args__ == getattr(Twin, "__match_args__", Sample.__match_args__)  # Python 3.10+
    assert fields_of(Sample) == fields_of(Twin)
    assert inspect.signature(Sample) == inspect.signature(Twin)


@pytest.mark.parametrize("call", [lambda: Sample(), lambda: Sample("k"), lambda: Sample("k", 1, {}, None, 1, 2),
                                  lambda: Sample("k", 1, other=1), lambda: Sample("k", 1, name="j")],
                         ids=["none", "one missing", "too many", "unknown keyword", "twice"])
def test_wrong_arguments_raise_type_error_as_a_dataclass_does(call):
    with pytest.raises(TypeError, match=r"Sample\.__init__\(\)"):
        call()


def test_a_record_is_frozen_and_copies_and_pickles():
    record = Sample("k", 1.0, {"a": [1]})
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        record.name = "j"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del record.name
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.deepcopy(record) == record and copy.copy(record) == record
    assert replace(record, count=9) == dataclasses.replace(record, count=9) == Sample("k", 1.0, {"a": [1]}, None, 9)
    assert record.__replace__(count=9) == replace(record, count=9)  # copy.replace from Python 3.13
    with pytest.raises(TypeError, match="unexpected keyword argument 'other'"):
        replace(record, other=1)


def test_the_package_records_keep_their_behaviour():
    found = rule("gemm", "nvjet")
    assert found == Rule("gemm", found.pattern, ("kernel",)) and found.matches("kernel", "nvjet_x")
    finding = Finding("gpu-idle", "low", "m", "f", saving_ms=2.0)
    assert finding.evidence == {} and finding.places == () and dataclasses.replace(finding, rule="x").rule == "x"
    trace = Trace("t")
    assert trace.columns == GpuColumns() and trace.syncs == SyncColumns() and trace.events == ()
    assert "timeline" not in repr(TraceSummary("p", Window(0, 1, "x"), 0, 0, 0, 0, 0, 0, (), (), (), (), (), None, ()))


def test_a_non_default_field_after_a_default_one_is_refused():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @frozen
        class Wrong:
            a: int = 1
            b: int


@tuple_record
class Span:
    """A named tuple with a default and a property."""

    start: int
    end: int
    label: str = ""

    @property
    def length(self) -> int:
        return self.end - self.start


class SpanTwin(NamedTuple):
    """The same as typing.NamedTuple."""

    start: int
    end: int
    label: str = ""


TUPLES = (GpuEvent, PlainEvent, Waits, Timeline, KeyTotals, Floor, Limit, Glance, FindingRule)


def test_a_tuple_record_is_the_named_tuple_typing_would_make():
    ours, twin = Span(1, 4), SpanTwin(1, 4)
    assert isinstance(ours, tuple) and ours == twin and hash(ours) == hash(twin) and tuple(ours) == (1, 4, "")
    assert repr(ours) == repr(twin).replace("SpanTwin", "Span") and ours.length == 3
    assert (Span._fields, Span._field_defaults) == (SpanTwin._fields, SpanTwin._field_defaults)
    assert Span.__match_args__ == getattr(SpanTwin, "__match_args__", Span._fields)  # Python 3.10+
    assert ours._asdict() == twin._asdict() and ours._replace(label="x") == twin._replace(label="x")
    assert ours.__replace__(label="x") == ours._replace(label="x")
    assert type(ours._replace(end=5)) is Span and Span._make([1, 2, "a"]) == Span(1, 2, "a") == Span(1, end=2, label="a")
    assert pickle.loads(pickle.dumps(ours)) == ours and type(copy.deepcopy(ours)) is Span
    assert not hasattr(ours, "__dict__") and Span.__qualname__ == "Span" and Span.__doc__.startswith("A named tuple")
    with pytest.raises(AttributeError):
        ours.start = 2
    for call in (lambda: Span(1), lambda: Span(1, 2, "a", 4), lambda: Span(1, 2, other=3), lambda: Span._make([1])):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(ValueError, match="unexpected field names"):
        ours._replace(other=1)


@pytest.mark.parametrize("cls", TUPLES, ids=lambda c: c.__name__)
def test_the_package_named_tuples_are_tuple_records_of_their_annotated_fields(cls):
    assert issubclass(cls, tuple) and cls.__slots__ == ()
    assert cls._fields == tuple(cls.__annotations__)
    assert [name for name in cls._fields if name in cls._field_defaults] == list(cls._fields[-len(cls._field_defaults):]
                                                                              if cls._field_defaults else [])


def test_a_post_init_is_refused_rather_than_ignored():
    with pytest.raises(TypeError, match="no __post_init__"):
        @frozen
        class Checked:
            a: int

            def __post_init__(self) -> None:
                pass


def test_records_made_from_dicts_are_the_records_init_makes():
    """records_of (a flush's WindowStats, TestProfiles and Windows) against cls(*values): the same
    fields in the same order, equal, frozen, replaceable, picklable; the package's dict displays name
    every field of their class, in order."""
    from pytest_gpuutil.analysis.windows import WindowStats, stats_of_rows
    from pytest_gpuutil.capture.window_split import spans_of
    from pytest_gpuutil.frozen import records_of
    from pytest_gpuutil.measurement.call_profile import TestProfile, profile_items

    (made,) = records_of(Window, [{"start_ns": 1, "end_ns": 5, "source": "test_call"}])
    assert made == Window(1, 5, "test_call") and list(made.__dict__) == list(Window.__record_fields__)
    assert replace(made, end_ns=7) == Window(1, 7, "test_call") and pickle.loads(pickle.dumps(made)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.end_ns = 2
    window = types.SimpleNamespace(start_ns=3, end_ns=9)
    assert spans_of([window])[0].__dict__ == Window(3, 9, "test_call").__dict__
    row = (Window(0, 10, "test_call"), 1.5, 15.0, 0.0, 2, 3, (("0", 1.5),), (("gemm", 1.5, 100.0, 15.0, 2),),
           (("k", "gemm", 2, 1.5, 0.75, 15.0),), (("0", 0.0, 8.5),), (("k", 2, 1.5),))
    (stats,) = stats_of_rows([row])
    expected = WindowStats(*row)
    assert stats.__dict__ == expected.__dict__ and list(stats.__dict__) == list(WindowStats.__record_fields__)
    assert stats.categories == expected.categories and stats.kernel_totals == expected.kernel_totals
    fields = [("t::a", 2.0, stats, "note", 0.5, None, (), None, (), None),
              ("t::b", 1.0, None, "not measured", 0.25, None, None, None, (), None)]
    for (key, profile), one in zip(profile_items(tuple(map(list, zip(*fields)))).items(), fields):
        expected_key, wall_ms, stats_, note, measure_ms, events, findings, syncs, processes, timeline = one
        expected_profile = TestProfile(wall_ms, stats_, note, measure_ms, stats_.window if stats_ is not None else None,
                                       events, None, findings, syncs, None, False, processes, timeline)
        assert key == expected_key and profile.__dict__ == expected_profile.__dict__
        assert list(profile.__dict__) == list(TestProfile.__record_fields__)
