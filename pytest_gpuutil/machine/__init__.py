"""The machine the run is on, read without torch and without the GPU's driver where it can be.

Its identity for gpu_util.json and baselines (``identity``: GPU model and count, driver, visible
GPUs, versions, git commit), the CUDA libraries this process has loaded (``loaded_libraries``:
the libcupti both event sources use), the GPUs' datasheet peaks (``peaks``) and what ``/proc``
says about a process (``processes``). The lowest layer: it imports nothing else of the package.
"""
