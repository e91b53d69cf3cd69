"""CPU tests of validation/first_run.py's reading of pytest's output."""
from __future__ import annotations

from validation.first_run import gpu_section, table_header

OUTPUT = """\
=========== test session starts ===========
gpu-util: on (turned on by --gpu-util-html)
collected 2 items

t.py ..                                 [100%]

---- GPU utilization (pytest-gpuutil) ----
test        GPU ms  busy %  mm/conv %  peak MiB
----------  ------  ------  ---------  --------
t.py::t_a    1.000    10.0        0.0      32.0
wrote .gpu_util/gpu_util.csv
=========== 2 passed in 0.10s ===========
""".splitlines()


def test_the_gpu_section_and_its_table_header():
    section = gpu_section(OUTPUT)
    assert section[0].startswith("test ") and section[-1] == "wrote .gpu_util/gpu_util.csv"
    assert table_header(section) == ["test", "GPU ms", "busy %", "mm/conv %", "peak MiB"]
    assert gpu_section(OUTPUT[:5]) == [] and table_header([]) == []
