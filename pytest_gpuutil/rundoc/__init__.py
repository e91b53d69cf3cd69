"""The run document, ``gpu_util.json``: its format and version, the record schema checked on
reading (one-line errors), building and serializing it, the run's totals, metric access, number
formatting and the machine's id. What the run writes and what reads runs back (the gates, the
HTML report, the history, the CLI) go through here. Imports only the per-test record; no pytest,
no torch.

- ``document.py``: the format's name and version, :class:`~pytest_gpuutil.rundoc.document.RunDoc`,
  the machine id, building and serializing a document, the names of a test's files beside it;
- ``reading.py``: a run file read back and checked;
- ``totals.py``: the whole run's figures and the per-GPU table;
- ``metrics.py``: the comparable metrics and how a record's values of one are read;
- ``number_format.py``: numbers as messages and tables show them.
"""
