"""The run's state and the glue around the measuring (pytest glue; nothing here imports pytest).

One :class:`~pytest_gpuutil.session.state.GpuUtilSession` per pytest process holds the run's
state; its parts, by what they do:

- ``state.py``: the one object: settings checked, this process's CUDA and GPUs, the parts below;
- ``measuring.py``: this process's tests measured (a plain run, or an xdist worker): windows,
  flushes, tests waiting for their profile, payloads, trace files;
- ``record_builder.py``: a test's record from its profile, its GPU memory and its fixtures' results;
- ``memory_report.py``: where a test's GPU memory went, for its failure report;
- ``receiving.py``: what the controller (or a plain run) does with a payload: keep the record,
  write the metric rows, note the thresholds;
- ``comparison.py``: the baseline, chosen at the start and compared with at the end;
- ``run_files.py``: what the run writes at its end (gpu_util.csv/json, baselines, HTML); the
  document itself and the run's totals are :mod:`pytest_gpuutil.rundoc`'s.
"""
from __future__ import annotations


class SetupError(Exception):
    """A bad option, ini value or baseline; the plugin turns it into pytest.UsageError."""
