"""Pass/fail decisions on per-test records: marker thresholds, baseline files and regression
comparisons. No pytest, no torch.
"""
