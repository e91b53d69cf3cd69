"""Measuring on the GPU: the per-test profiler, events read from a live torch.profiler session,
CUDA-event timings. torch is imported only inside the functions that need it.
"""
