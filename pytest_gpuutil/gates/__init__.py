"""Pass/fail decisions on per-test records: marker thresholds, ``--gpu-util-fail`` expressions,
saved baselines and regression comparisons. The run files they read, and the metrics and numbers
they show, are :mod:`pytest_gpuutil.rundoc`'s. No pytest, no torch.
"""
