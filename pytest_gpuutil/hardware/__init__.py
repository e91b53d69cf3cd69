"""Hardware counters: what the GPU's units did (SM, tensor pipes, DRAM), its energy, who else used it.

Sources (each yields timestamped samples, see :class:`~pytest_gpuutil.analysis.counters.CounterSamples`):
CUPTI PM sampling (``cupti_pm``, fine-grained, needs profiling permission), NVML GPM (``nvml``,
Hopper and later, ~100 ms samples) and NVML's plain utilisation (energy only). A background
thread (``sampler``) owns the device-side state; ``capture`` stamps test windows and attributes the
samples to them with the pure functions of :mod:`pytest_gpuutil.analysis.counters`. Nothing here
is imported at plugin load; NVML (``pynvml``) is imported only when the counters are opened.
"""
