"""The parameter structs and constants of CUPTI's PM Sampling and Profiler Host APIs, through ctypes.

Every parameter struct carries ``structSize`` = offset + size of its last field, exactly as
``CUPTI_PROFILER_STRUCT_SIZE`` computes it (``cupti_pmsampling.h``, ``cupti_profiler_host.h``); a
struct made here sets it on construction. :mod:`pytest_gpuutil.hardware.cupti_pm` makes the calls.
"""
from __future__ import annotations

import ctypes as C
from typing import Any, Sequence

import numpy as np

_VP, _SZ, _U8P, _CP = C.c_void_p, C.c_size_t, C.POINTER(C.c_uint8), C.c_char_p

#: CUpti_ProfilerType, CUpti_PmSampling_TriggerMode, DecodeStopReason, HardwareBuffer_AppendMode
PROFILER_TYPE_PM_SAMPLING = 1
TRIGGER_SYSCLK, TRIGGER_TIME = 0, 1
STOP_COUNTER_DATA_FULL = 1
APPEND_KEEP_OLDEST = 0
SUCCESS = 0
INSUFFICIENT_PRIVILEGES = 35


class PmSamplingError(Exception):
    """A PM sampling call failed; the message names the call and CUPTI's result string."""

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        self.code = code


def _params(name: str, fields: Sequence[tuple[str, Any]]) -> type:
    """A ctypes struct for a CUPTI params type whose ``structSize`` is set on construction."""
    cls = type(name, (C.Structure,), {"_fields_": [("structSize", _SZ), ("pPriv", _VP), *fields]})
    last, last_type = cls._fields_[-1]
    size = getattr(cls, last).offset + C.sizeof(last_type)

    def __init__(self: Any, **values: Any) -> None:
        C.Structure.__init__(self, **values)
        self.structSize = size

    cls.__init__ = __init__
    cls.STRUCT_SIZE = size
    return cls


ProfilerInitialize = _params("CUpti_Profiler_Initialize_Params", [])
ChipName = _params("CUpti_Device_GetChipName_Params", [("deviceIndex", _SZ), ("pChipName", _CP)])
CounterAvailability = _params("CUpti_PmSampling_GetCounterAvailability_Params", [
    ("deviceIndex", _SZ), ("counterAvailabilityImageSize", _SZ), ("pCounterAvailabilityImage", _U8P)])
HostInitialize = _params("CUpti_Profiler_Host_Initialize_Params", [
    ("profilerType", C.c_int), ("pChipName", _CP), ("pCounterAvailabilityImage", _U8P), ("pHostObject", _VP)])
HostDeinitialize = _params("CUpti_Profiler_Host_Deinitialize_Params", [("pHostObject", _VP)])
ConfigAddMetrics = _params("CUpti_Profiler_Host_ConfigAddMetrics_Params", [
    ("pHostObject", _VP), ("ppMetricNames", C.POINTER(_CP)), ("numMetrics", _SZ)])
ConfigImageSize = _params("CUpti_Profiler_Host_GetConfigImageSize_Params", [("pHostObject", _VP), ("configImageSize", _SZ)])
ConfigImage = _params("CUpti_Profiler_Host_GetConfigImage_Params", [
    ("pHostObject", _VP), ("configImageSize", _SZ), ("pConfigImage", _U8P)])
NumOfPasses = _params("CUpti_Profiler_Host_GetNumOfPasses_Params", [
    ("configImageSize", _SZ), ("pConfigImage", _U8P), ("numOfPasses", _SZ)])
Enable = _params("CUpti_PmSampling_Enable_Params", [("deviceIndex", _SZ), ("pPmSamplingObject", _VP)])
SamplingObject = _params("CUpti_PmSampling_Start_Params", [("pPmSamplingObject", _VP)])  # also Stop, Disable
SetConfig = _params("CUpti_PmSampling_SetConfig_Params", [
    ("pPmSamplingObject", _VP), ("configSize", _SZ), ("pConfig", _U8P), ("hardwareBufferSize", _SZ),
    ("samplingInterval", C.c_uint64), ("triggerMode", C.c_int), ("hwBufferAppendMode", C.c_int)])
CounterDataSize = _params("CUpti_PmSampling_GetCounterDataSize_Params", [
    ("pPmSamplingObject", _VP), ("pMetricNames", C.POINTER(_CP)), ("numMetrics", _SZ), ("maxSamples", C.c_uint32),
    ("counterDataSize", _SZ)])
CounterDataInitialize = _params("CUpti_PmSampling_CounterDataImage_Initialize_Params", [
    ("pPmSamplingObject", _VP), ("counterDataSize", _SZ), ("pCounterData", _U8P)])
DecodeData = _params("CUpti_PmSampling_DecodeData_Params", [
    ("pPmSamplingObject", _VP), ("pCounterDataImage", _U8P), ("counterDataImageSize", _SZ),
    ("decodeStopReason", C.c_int), ("overflow", C.c_uint8)])
CounterDataInfo = _params("CUpti_PmSampling_GetCounterDataInfo_Params", [
    ("pCounterDataImage", _U8P), ("counterDataImageSize", _SZ), ("numTotalSamples", _SZ),
    ("numPopulatedSamples", _SZ), ("numCompletedSamples", _SZ)])
SampleInfo = _params("CUpti_PmSampling_CounterData_GetSampleInfo_Params", [
    ("pPmSamplingObject", _VP), ("pCounterDataImage", _U8P), ("counterDataImageSize", _SZ), ("sampleIndex", _SZ),
    ("startTimestamp", C.c_uint64), ("endTimestamp", C.c_uint64)])
Evaluate = _params("CUpti_Profiler_Host_EvaluateToGpuValues_Params", [
    ("pHostObject", _VP), ("pCounterDataImage", _U8P), ("counterDataImageSize", _SZ), ("rangeIndex", _SZ),
    ("ppMetricNames", C.POINTER(_CP)), ("numMetrics", _SZ), ("pMetricValues", C.POINTER(C.c_double))])


def c_strings(values: Sequence[str]) -> Any:
    """A C array of the names, encoded (``const char**``)."""
    return (_CP * len(values))(*[v.encode() for v in values])


def u8_pointer(buffer: np.ndarray) -> Any:
    """The numpy buffer as a ``uint8_t*``."""
    return buffer.ctypes.data_as(_U8P)
