"""CUPTI's PM Sampling API through ctypes, on the libcupti torch already loaded (CUPTI 12.6+).

The GPU samples its performance counters on a fixed interval of GPU time into a hardware buffer;
this source decodes that buffer into a small counter data image, evaluates each completed sample
into metric values (percent of peak) with the Profiler Host API, and re-initialises the image when
it fills. Each sample has a start and end timestamp on CUPTI's clock (wall-clock nanoseconds, as
``time.time_ns``), so tests get exact per-window figures.

Costs measured on an H100 (CUPTI 13.0): start-up ~0.6 s (profiler initialise 0.1 s, counter
availability 0.14 s, SetConfig 0.3 s); a counter data image holds ~35 KB per sample, so the image
is kept small (a few seconds of samples) and decoded from the sampler's thread, where the calls
release the GIL; evaluating a sample costs ~0.03 ms (one CUPTI call per sample: the API has no
batch form; the Python around it keeps to a tuple per sample and column stores per poll). Needs profiling permission (root, or the
driver option ``NVreg_RestrictProfilingToAdminUsers=0``); not on MIG instances.

The parameter structs are in :mod:`pytest_gpuutil.hardware.pm_structs`; the choice of metrics that
fit one pass on the chip, in :mod:`pytest_gpuutil.hardware.pm_metrics`.
"""
from __future__ import annotations

import ctypes as C
import os
import time
from typing import Any, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.counters import CounterSamples
from pytest_gpuutil.hardware.pm_metrics import METRICS, MetricChoice, MetricChooser
from pytest_gpuutil.hardware.pm_structs import (
    APPEND_KEEP_OLDEST,
    INSUFFICIENT_PRIVILEGES,
    STOP_COUNTER_DATA_FULL,
    SUCCESS,
    TRIGGER_SYSCLK,
    TRIGGER_TIME,
    ChipName,
    CounterAvailability,
    CounterDataInfo,
    CounterDataInitialize,
    CounterDataSize,
    DecodeData,
    Enable,
    Evaluate,
    HostDeinitialize,
    PmSamplingError,
    ProfilerInitialize,
    SampleInfo,
    SamplingObject,
    SetConfig,
    c_strings,
    u8_pointer,
)

#: a timestamp this close to time.time_ns() is wall-clock ns; further off, it is Kineto's clock
_WALL_CLOCK_NS = 60_000_000_000
#: the counter data image holds this many seconds of samples (~35 KB a sample on an H100), within
#: the bounds below: 2,000 samples at 1 ms as before, 400 (14 MB instead of 70) at the default 5 ms
IMAGE_SECONDS = 2.0
IMAGE_SAMPLES_MIN, IMAGE_SAMPLES_MAX = 400, 2000


def image_samples(interval_ns: int) -> int:
    """How many samples the counter data image is made for at ``interval_ns``: IMAGE_SECONDS of them.

    Its initialisation (at start-up, and again each time it is half full) costs in proportion to
    its size (~0.1 s for 2,000 samples on an H100). It is initialised again once half full, so a
    poll that comes a whole IMAGE_SECONDS / 2 late still finds room (polls come every 0.1 s).
    """
    wanted = int(IMAGE_SECONDS * 1e9 / max(1, interval_ns))
    return max(IMAGE_SAMPLES_MIN, min(IMAGE_SAMPLES_MAX, wanted))


class PmSamplingSource:
    """Hardware-counter samples from CUPTI PM sampling (see the module docstring).

    Only one thread may call it at a time: the sampler's thread polls, the caller starts and stops
    it while that thread is not running.
    """

    name = "cupti_pm_sampling"
    #: samples the hardware buffer takes between two polls
    SAMPLES_PER_POLL = 100
    #: the longest time between two polls. On an H100 the decode failed with
    #: CUPTI_ERROR_OUT_OF_MEMORY after 0.5 s polls at 1 ms (500 samples) and at 5 ms (100 samples),
    #: while 0.1 s polls held at 0.25 ms (400 samples) and at 1 ms: it is the time between polls that
    #: matters, not the sample count
    MAX_POLL_S = 0.1

    def __init__(self, library_path: str, device_index: int = 0, interval_ns: int = 1_000_000,
                 max_samples: Optional[int] = None, hardware_buffer_bytes: int = 64 << 20,
                 metrics: Sequence[MetricChoice] = METRICS, max_poll_s: Optional[float] = None,
                 reset_fill: float = 0.5):
        try:
            self._lib = C.CDLL(library_path, mode=os.RTLD_NOLOAD | C.RTLD_GLOBAL)  # calls release the GIL
        except OSError as exc:
            raise PmSamplingError(f"cannot use {library_path}: {exc}") from None
        missing = [n for n in ("cuptiPmSamplingEnable", "cuptiProfilerHostInitialize", "cuptiPmSamplingDecodeData")
                   if not hasattr(self._lib, n)]
        if missing:
            raise PmSamplingError(f"{os.path.basename(library_path)} has no PM sampling API (CUPTI 12.6 or later "
                                  "needed: torch 2.7 or later from PyPI, or a torch built with CUDA 12.6 or later)")
        self._lib.cuptiGetResultString.argtypes = [C.c_int, C.POINTER(C.c_char_p)]
        self._lib.cuptiGetTimestamp.argtypes = [C.POINTER(C.c_uint64)]
        self.library_path = library_path
        self.device_index = device_index
        self.interval_ns = int(interval_ns)
        self.max_samples = int(max_samples) if max_samples else image_samples(self.interval_ns)
        if max_poll_s:
            self.MAX_POLL_S = float(max_poll_s)
        #: the image is initialised again after a poll that leaves it this full (0: after every poll
        #: with samples); an image that fills in the middle of a decode loses samples
        self.reset_fill = float(reset_fill)
        self.hardware_buffer_bytes = int(hardware_buffer_bytes)
        self._wanted = tuple(metrics)
        #: the fields measured and the CUPTI metric behind each (known after start)
        self.fields: tuple[str, ...] = ()
        self.metric_names: tuple[str, ...] = ()
        self.chip = ""
        #: the sampling period in ns (None until known); with the SYSCLK trigger, measured from samples
        self.period_ns: Optional[int] = None
        self.trigger = TRIGGER_TIME
        self.overflows = 0
        #: seconds spent decoding and evaluating (the sampler reports the cost), wall and this
        #: thread's CPU: decode is CUPTI's DecodeData, evaluate its per-sample calls and the columns
        #: around them; the rest of a poll's CPU (poll_cpu_s less both) is the Python around them
        self.decode_s = 0.0
        self.evaluate_s = 0.0
        self.decode_cpu_s = 0.0
        self.evaluate_cpu_s = 0.0
        self.poll_cpu_s = 0.0
        #: CPU of the image's initialisations once sampling runs (part of the polls' CPU)
        self.reset_cpu_s = 0.0
        self.polls = 0
        self.decodes = 0
        #: per poll (decode wall s, decode CPU s, evaluate CPU s, poll CPU s, samples, samples already
        #: in the image before it), when a list (a diagnostic sets it; None: not kept)
        self.poll_log: Optional[list[tuple[float, float, float, float, int, int]]] = None
        self.samples = 0
        self.startup_steps: dict[str, float] = {}
        self._host: Optional[int] = None
        self._object: Optional[int] = None
        self._image: Optional[np.ndarray] = None
        self._evaluated = 0
        self._started = False
        self._names_array: Any = None
        #: the last sample's end: the first sample of a fresh image starts there (its own start is garbage)
        self._last_end = 0
        #: (ticks, ns, ns per tick) mapping CUPTI's clock onto the wall clock once Kineto replaced it
        self._tsc: Optional[tuple[int, int, float]] = None
        self.image_resets = 0

    # -- calls ------------------------------------------------------------------------------------
    def _call(self, name: str, params: Any) -> Any:
        fn = getattr(self._lib, name)
        result = fn(C.byref(params))
        if result != SUCCESS:
            text = C.c_char_p()
            self._lib.cuptiGetResultString(result, C.byref(text))
            raise PmSamplingError(f"{name} failed: {text.value.decode() if text.value else 'error ' + str(result)}", result)
        return params

    def _timed(self, step: str, name: str, params: Any) -> Any:
        began = time.perf_counter()
        try:
            return self._call(name, params)
        finally:
            self.startup_steps[step] = self.startup_steps.get(step, 0.0) + time.perf_counter() - began

    # -- set-up -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise the profiler, choose one-pass metrics, configure and start sampling (~0.6 s)."""
        self._timed("initialize", "cuptiProfilerInitialize", ProfilerInitialize())
        chip = self._timed("chip", "cuptiDeviceGetChipName", ChipName(deviceIndex=self.device_index)).pChipName
        self.chip = chip.decode() if chip else ""
        size = self._timed("availability", "cuptiPmSamplingGetCounterAvailability",
                           CounterAvailability(deviceIndex=self.device_index)).counterAvailabilityImageSize
        availability = np.zeros(size, dtype=np.uint8)
        self._timed("availability", "cuptiPmSamplingGetCounterAvailability", CounterAvailability(
            deviceIndex=self.device_index, counterAvailabilityImageSize=size, pCounterAvailabilityImage=u8_pointer(availability)))
        chooser = MetricChooser(self._call, chip, availability, self.startup_steps)
        chosen, config = chooser.choose(self._wanted, self.chip)
        self._host = chooser.host
        self.fields = tuple(field for field, _ in chosen)
        self.metric_names = tuple(name for _, name in chosen)
        self._names_array = c_strings(self.metric_names)
        self._object = self._timed("enable", "cuptiPmSamplingEnable", Enable(deviceIndex=self.device_index)).pPmSamplingObject
        try:
            self._configure(config)
            data_size = self._timed("counter data", "cuptiPmSamplingGetCounterDataSize", CounterDataSize(
                pPmSamplingObject=self._object, pMetricNames=self._names_array, numMetrics=len(self.metric_names),
                maxSamples=self.max_samples)).counterDataSize
            self._image = np.zeros(data_size, dtype=np.uint8)
            self._initialize_image()
            self._timed("start", "cuptiPmSamplingStart", SamplingObject(pPmSamplingObject=self._object))
        except Exception:
            self._release()
            raise
        self._started = True
        self._bind_hot_calls()

    def _configure(self, config: np.ndarray) -> None:
        """SetConfig on a GPU-time interval; chips without it (GA100, Turing) get SYSCLK cycles."""
        self._config_image = config  # CUPTI may keep a pointer to it
        params = SetConfig(pPmSamplingObject=self._object, configSize=config.size, pConfig=u8_pointer(config),
                           hardwareBufferSize=self.hardware_buffer_bytes, samplingInterval=self.interval_ns,
                           triggerMode=TRIGGER_TIME, hwBufferAppendMode=APPEND_KEEP_OLDEST)
        try:
            self._timed("set config", "cuptiPmSamplingSetConfig", params)
            self.period_ns = self.interval_ns
        except PmSamplingError as exc:
            if exc.code == INSUFFICIENT_PRIVILEGES:
                raise
            # cycles of the ~1-2 GHz system clock: the period is measured from the samples
            params.triggerMode, params.samplingInterval = TRIGGER_SYSCLK, max(1, int(self.interval_ns * 1.5))
            self._timed("set config", "cuptiPmSamplingSetConfig", params)
            self.trigger, self.period_ns = TRIGGER_SYSCLK, None

    def _initialize_image(self) -> None:
        self.image_resets += 1
        cpu = time.thread_time()
        self._timed("counter data" if not self._started else "image resets", "cuptiPmSamplingCounterDataImageInitialize",
                    CounterDataInitialize(pPmSamplingObject=self._object, counterDataSize=self._image.size,  # type: ignore[union-attr]
                                          pCounterData=u8_pointer(self._image)))
        self.reset_cpu_s += time.thread_time() - cpu
        self._evaluated = 0

    def _bind_hot_calls(self) -> None:
        """Parameter structs built once for the per-sample calls (only the index changes)."""
        image = self._image
        self._values = (C.c_double * len(self.metric_names))()
        self._values_view = np.ctypeslib.as_array(self._values)  # copied into a row without a list between
        self._decode = DecodeData(pPmSamplingObject=self._object, pCounterDataImage=u8_pointer(image), counterDataImageSize=image.size)
        self._info = CounterDataInfo(pCounterDataImage=u8_pointer(image), counterDataImageSize=image.size)
        self._sample = SampleInfo(pPmSamplingObject=self._object, pCounterDataImage=u8_pointer(image), counterDataImageSize=image.size)
        self._evaluate = Evaluate(pHostObject=self._host, pCounterDataImage=u8_pointer(image), counterDataImageSize=image.size,
                                  ppMetricNames=self._names_array, numMetrics=len(self.metric_names), pMetricValues=self._values)
        self._fn_info = self._lib.cuptiPmSamplingCounterDataGetSampleInfo
        self._fn_evaluate = self._lib.cuptiProfilerHostEvaluateToGpuValues

    @property
    def sample_latency_ns(self) -> int:
        """No sample covers a time until a period has passed it (the sampler waits that long before a poll)."""
        return int(self.period_ns or 0)

    @property
    def poll_interval_s(self) -> float:
        """How often the sampler polls (decodes): at least every MAX_POLL_S, and often enough that the
        hardware buffer never holds more than SAMPLES_PER_POLL samples, but not more often than every
        50 ms (a decode costs ~10 ms of CPU on an H100; a flush asks for a poll when it needs the samples)."""
        return min(self.MAX_POLL_S, max(0.05, self.SAMPLES_PER_POLL * self.interval_ns / 1e9))

    # -- sampling ---------------------------------------------------------------------------------
    def poll(self) -> CounterSamples:
        """Decode what the hardware buffered and evaluate the samples completed since the last poll.

        The image is initialised again once it is half full and everything buffered is decoded:
        an image that fills in the middle of a decode loses samples (gaps of 5-40 ms seen on an H100).
        """
        if not self._started:
            return CounterSamples()
        cpu_began, in_image = time.thread_time(), self._evaluated
        decode_wall = decode_cpu = evaluate_cpu = 0.0
        parts = []
        for _ in range(64):  # each pass empties the image once; a poll rarely needs a second
            began, cpu = time.perf_counter(), time.thread_time()
            self._decode.decodeStopReason, self._decode.overflow = 0, 0
            try:
                self._call("cuptiPmSamplingDecodeData", self._decode)
            finally:
                decode_wall += time.perf_counter() - began
                decode_cpu += time.thread_time() - cpu
                self.decodes += 1
            if self._decode.overflow:
                self.overflows += 1
            cpu = time.thread_time()
            parts.append(self._evaluate_completed())
            evaluate_cpu += time.thread_time() - cpu
            full = self._decode.decodeStopReason == STOP_COUNTER_DATA_FULL
            if full or (self._evaluated and self._evaluated >= self.reset_fill * self.max_samples):
                self._initialize_image()
            if not full:
                break
        samples = self._on_wall_clock(CounterSamples.concat(parts))
        if self.trigger == TRIGGER_SYSCLK and self.period_ns is None and len(samples) >= 8:
            self.period_ns = samples.median_period_ns()
        poll_cpu = time.thread_time() - cpu_began
        self.polls += 1
        self.decode_s += decode_wall
        self.decode_cpu_s += decode_cpu
        self.evaluate_cpu_s += evaluate_cpu
        self.poll_cpu_s += poll_cpu
        if self.poll_log is not None:
            self.poll_log.append((decode_wall, decode_cpu, evaluate_cpu, poll_cpu, len(samples), in_image))
        return samples

    def _evaluate_completed(self) -> CounterSamples:
        began = time.perf_counter()
        self._call("cuptiPmSamplingGetCounterDataInfo", self._info)
        first, last = self._evaluated, int(self._info.numCompletedSamples)
        count = max(0, last - first)
        starts = np.zeros(count, dtype=np.int64)
        ends = np.zeros(count, dtype=np.int64)
        values = np.full((count, len(self.metric_names)), np.nan)
        sample, evaluate = self._sample, self._evaluate
        info_ref, evaluate_ref = C.byref(sample), C.byref(evaluate)
        fn_info, fn_evaluate, out = self._fn_info, self._fn_evaluate, self._values_view
        stamps: list[tuple[int, int]] = []
        for row, index in enumerate(range(first, last)):
            sample.sampleIndex = evaluate.rangeIndex = index
            if fn_info(info_ref) != SUCCESS:
                stamps.append((0, 0))
                continue
            stamps.append((sample.startTimestamp, sample.endTimestamp))
            if fn_evaluate(evaluate_ref) == SUCCESS:
                values[row] = out
        if count:  # the timestamps as columns at once, not one numpy store per sample
            starts[:], ends[:] = np.asarray(stamps, dtype=np.int64).T
            if first == 0 and self._last_end and (starts[0] >= ends[0] or starts[0] < self._last_end):
                starts[0] = self._last_end  # a fresh image's first sample: it follows the last one
        if count:
            self._last_end = int(ends[ends > 0].max(initial=self._last_end))
        self._evaluated = last
        self.samples += count
        self.evaluate_s += time.perf_counter() - began
        return CounterSamples(starts, ends, {field: values[:, i] for i, field in enumerate(self.fields)}).tidy()

    def _ticks(self) -> int:
        stamp = C.c_uint64()
        self._lib.cuptiGetTimestamp(C.byref(stamp))
        return stamp.value

    def _on_wall_clock(self, samples: CounterSamples) -> CounterSamples:
        samples, self._tsc = on_wall_clock(samples, self._tsc, self._ticks)
        return samples

    def stop(self) -> CounterSamples:
        """Stop sampling and return what was left in the buffer; the device-side state is released."""
        if not self._started:
            return CounterSamples()
        parts = []
        try:
            parts.append(self.poll())
            self._call("cuptiPmSamplingStop", SamplingObject(pPmSamplingObject=self._object))
            parts.append(self.poll())
        finally:
            self._started = False
            self._release()
        return CounterSamples.concat(parts)

    def _release(self) -> None:
        if self._object is not None:
            try:
                self._call("cuptiPmSamplingDisable", SamplingObject(pPmSamplingObject=self._object))
            except PmSamplingError:
                pass
            self._object = None
        if self._host is not None:
            try:
                self._call("cuptiProfilerHostDeinitialize", HostDeinitialize(pHostObject=self._host))
            except PmSamplingError:
                pass
            self._host = None


def on_wall_clock(samples: CounterSamples, tsc: Optional[tuple[int, int, float]],
                  ticks: Any) -> tuple[CounterSamples, Optional[tuple[int, int, float]]]:
    """Samples with their timestamps in wall-clock ns, and the (ticks, ns, ns per tick) mapping used.

    CUPTI stamps samples with its own clock: wall-clock ns by default, but after a
    torch.profiler session Kineto's timestamp callback (TSC ticks) stays in place for the
    process. Those samples are mapped onto the wall clock (20 ms of calibration with ``ticks()``, once).
    """
    if not len(samples):
        return samples, tsc
    foreign = np.abs(samples.end_ns - time.time_ns()) > _WALL_CLOCK_NS
    if not foreign.any():
        return samples, tsc
    if tsc is None:
        t0, c0 = time.time_ns(), ticks()
        while time.time_ns() - t0 < 20_000_000:
            pass
        t1, c1 = time.time_ns(), ticks()
        tsc = (c1, t1, (t1 - t0) / (c1 - c0) if c1 > c0 else 1.0)
    ref_ticks, ref_ns, ns_per_tick = tsc

    def mapped(stamps: np.ndarray) -> np.ndarray:
        return np.where(foreign, ref_ns + np.rint((stamps - ref_ticks).astype(np.float64) * ns_per_tick).astype(np.int64),
                        stamps)

    return CounterSamples(mapped(samples.start_ns), mapped(samples.end_ns), samples.values).tidy(), tsc
