"""The PM sampling structs: ``structSize`` is CUPTI_PROFILER_STRUCT_SIZE (offset + size of the last field).

CUPTI checks ``structSize`` and refuses a wrong one, so a field left out or mistyped would only
show on a GPU. The expected sizes are worked out by hand from CUPTI 13.0's headers
(``cupti_pmsampling.h``, ``cupti_profiler_host.h``, ``cupti_profiler_target.h``, ``cupti_target.h``)
for LP64: pointers and size_t 8 bytes, enums and uint32 4, uint8 1, no trailing padding.
"""
from __future__ import annotations

import ctypes

import pytest

from pytest_gpuutil.hardware import pm_structs

EXPECTED = {
    # structSize, pPriv: 16 bytes first in every struct
    "ProfilerInitialize": 16,  # only the two
    "ChipName": 32,  # deviceIndex, pChipName
    "CounterAvailability": 40,  # deviceIndex, imageSize, pImage
    "HostInitialize": 48,  # profilerType (int @16, padded), pChipName @24, pAvailability @32, pHostObject @40
    "HostDeinitialize": 24,
    "ConfigAddMetrics": 40,  # pHostObject, ppMetricNames, numMetrics
    "ConfigImageSize": 32,
    "ConfigImage": 40,
    "NumOfPasses": 40,  # configImageSize, pConfigImage, numOfPasses
    "Enable": 32,  # deviceIndex, pPmSamplingObject
    "SamplingObject": 24,  # Start, Stop and Disable: pPmSamplingObject
    "SetConfig": 64,  # obj, configSize, pConfig, hwBufferSize, interval (u64 @48), triggerMode @56, appendMode @60
    "CounterDataSize": 56,  # obj, pMetricNames, numMetrics, maxSamples (u32 @40, padded), counterDataSize @48
    "CounterDataInitialize": 40,
    "DecodeData": 45,  # obj, image, size, decodeStopReason (enum @40), overflow (u8 @44): 45, not 48
    "CounterDataInfo": 56,  # image, size, total, populated, completed
    "SampleInfo": 64,  # obj, image, size, sampleIndex, start (u64), end (u64)
    "Evaluate": 72,  # host, image, size, rangeIndex, ppMetricNames, numMetrics, pMetricValues
}


@pytest.mark.parametrize("name, size", sorted(EXPECTED.items()))
def test_struct_size_is_cuptis(name: str, size: int) -> None:
    cls = getattr(pm_structs, name)
    assert cls.STRUCT_SIZE == size
    assert cls().structSize == size  # set on construction, never left 0
    assert ctypes.sizeof(cls) >= size


def test_fields_are_set_by_keyword_and_the_size_stays() -> None:
    params = pm_structs.SetConfig(samplingInterval=1_000_000, triggerMode=pm_structs.TRIGGER_TIME)
    assert (params.samplingInterval, params.triggerMode, params.structSize) == (1_000_000, 1, 64)

