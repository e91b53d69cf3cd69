"""Columns of GPU events to summaries: the kernel classifier and the interval analysis
(busy time, categories, top kernels, idle gaps, overlap). No pytest, no torch.
"""
