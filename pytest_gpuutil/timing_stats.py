"""What a ``kernel_bench`` timing gives: statistics of per-run times, and the records that hold them.

Pure: no torch, no pytest. :mod:`pytest_gpuutil.capture.timing` times and builds a
:class:`TimingResult` from its per-run times with :func:`summarize` and :func:`throughput`; the
report reads the records (``TimingResult.to_dict`` goes into each test's record). Apart from
:mod:`~pytest_gpuutil.analysis.stats` (a trace's figures, which ``gpuutil analyze`` imports) and
from :mod:`~pytest_gpuutil.capture.timing` (which imports torch when it times).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

Timer = Literal["cuda_event", "cuda_graph", "perf_counter"]

#: Values of ``TimingResult.timer``.
TIMERS: tuple[str, ...] = ("cuda_event", "cuda_graph", "perf_counter")


@dataclass(frozen=True)
class TimingStats:
    """Summary statistics of per-run times in milliseconds."""

    median: float
    mean: float
    std: float
    min: float
    max: float
    p20: float
    p80: float
    reps: int


@dataclass(frozen=True)
class TimingResult:
    """One timed callable: statistics over its per-run times in milliseconds, and derived rates."""

    label: str
    median: float
    mean: float
    std: float
    min: float
    max: float
    p20: float
    p80: float
    reps: int
    warmup_reps: int
    timer: Timer
    #: GPU name (``torch.cuda.get_device_name``) or ``"cpu"``
    device: str
    unit: str = "ms"
    #: ``bytes / median``, in GB/s (1e9 bytes per second); None when bytes was not given
    gbps: float | None = None
    #: ``flops / median``, in TFLOP/s (1e12 per second); None when flops was not given
    tflops: float | None = None
    bytes: int | None = None
    flops: int | None = None
    #: why the timing differs from a CUDA-event timing (CPU fallback), else ""
    note: str = ""
    #: the device's peak for ``tflops`` (data type ``flops_dtype``) and ``gbps``, and the share of
    #: it reached, in percent; ``peak_source`` says where the peaks come from (a datasheet, or the
    #: measured copy ceiling for bandwidth on a GPU the table does not know)
    flops_dtype: str = ""
    peak_tflops: float | None = None
    tflops_pct_of_peak: float | None = None
    peak_gbps: float | None = None
    gbps_pct_of_peak: float | None = None
    peak_source: str = ""
    #: the hardware counters over the timed reps (None: not read), and why they are empty
    sm_pct: float | None = None
    tensor_pct: float | None = None
    dram_bw_pct: float | None = None
    counters_note: str = ""
    #: the per-rep times (ms) in the order measured; kept in memory only (not in ``to_dict``)
    times_ms: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)
    #: the timed reps' span on the clock given to ``bench`` (``clock_ns``); in memory only
    timed_span_ns: tuple[int, int] | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise ValueError(f"timer must be one of {', '.join(TIMERS)}, got {self.timer!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of JSON-safe values (str, int, float, None), one key per field but ``times_ms``."""
        data = dataclasses.asdict(self)
        del data["times_ms"], data["timed_span_ns"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingResult:
        """Inverse of ``to_dict``; ignores unknown keys, raises ValueError naming missing ones."""
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        required = [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"TimingResult.from_dict: missing key(s) {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class FwdBwdResult:
    """Forward and backward timings of one ``bench_fwd_bwd`` call."""

    forward: TimingResult
    backward: TimingResult

    def to_dict(self) -> dict[str, Any]:
        """``{"forward": ..., "backward": ...}`` of ``TimingResult.to_dict()``."""
        return {"forward": self.forward.to_dict(), "backward": self.backward.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FwdBwdResult:
        """Inverse of ``to_dict``."""
        return cls(
            forward=TimingResult.from_dict(data["forward"]),
            backward=TimingResult.from_dict(data["backward"]),
        )


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Quantile of already sorted values by linear interpolation (``torch.quantile``'s default)."""
    if not sorted_values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize(times_ms: Sequence[float]) -> TimingStats:
    """Statistics of per-run times.

    ``median``, ``p20`` and ``p80`` interpolate linearly between neighbours (``torch.quantile``;
    for an even count the median is the mean of the two middle values, unlike ``torch.median``);
    ``std`` is the sample standard deviation (n - 1, as ``torch.std``), 0.0 for a single time.
    """
    values = [float(t) for t in times_ms]
    if not values:
        raise ValueError("summarize needs at least one time")
    bad = [t for t in values if not math.isfinite(t) or t < 0.0]
    if bad:
        raise ValueError(f"times must be finite and >= 0, got {bad[0]!r}")
    ordered = sorted(values)
    count = len(ordered)
    mean = math.fsum(ordered) / count
    if count > 1:
        std = math.sqrt(math.fsum((t - mean) ** 2 for t in ordered) / (count - 1))
    else:
        std = 0.0
    return TimingStats(
        median=quantile(ordered, 0.5),
        mean=mean,
        std=std,
        min=ordered[0],
        max=ordered[-1],
        p20=quantile(ordered, 0.2),
        p80=quantile(ordered, 0.8),
        reps=count,
    )


def throughput(
    median_ms: float, bytes: int | None, flops: int | None
) -> tuple[float | None, float | None]:
    """``(GB/s, TFLOP/s)`` at the median time; None where the count is None or the time is 0."""
    if median_ms <= 0.0:
        return None, None
    seconds = median_ms / 1e3
    gbps = None if bytes is None else bytes / seconds / 1e9
    tflops = None if flops is None else flops / seconds / 1e12
    return gbps, tflops
