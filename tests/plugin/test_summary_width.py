"""The summary fits the terminal: a parametrized suite with long ids under a deep folder.

Figures are planted through the plugin's own pytest_gpuutil_record hook (tests/helpers
PLANT_CONFTEST), so the tables are those of a GPU run.
"""
from __future__ import annotations

import pytest

from tests.helpers import PLANT_CONFTEST, output, plant, run

pytestmark = pytest.mark.usefixtures("warm_torch")

FOLDER = "tests/models/vision/backbones"
FILE = "test_resnet_family_forward_backward.py"
MODELS = ["resnet50_gn_a1h_in1k", "resnet101_clip_gap.openai_ft_in12k_in1k_384", "seresnext101_32x8d.ah_in22k_ft",
          "resnet_" + "very_long_" * 9 + "end"]
BATCHES = [1, 8]
SUITE = f"""
import pytest

@pytest.mark.parametrize("model", {MODELS!r})
@pytest.mark.parametrize("batch", {BATCHES!r})
def test_model_forward_backward(model, batch):
    pass
"""
KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
          "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")


def params() -> list[str]:
    return [f"[{b}-{m}]" for m in MODELS for b in BATCHES]


@pytest.fixture
def deep_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(PLANT_CONFTEST)
    folder = pytester.path / FOLDER
    folder.mkdir(parents=True)
    (folder / FILE).write_text(SUITE)
    plant(pytester, **{
        f"test_model_forward_backward{p}": {
            "busy_pct": 40.0 + i, "gpu_busy_ms": 100.0 * (i + 1), "mm_conv_pct": 30.0, "attention_pct": 1.5,  # no comm %
            "kernel_count": 900 + i, "wall_ms": 1000.0 + i, "peak_alloc_mb": 2048.0 + i,
            "peak_reserved_mb": 4096.0, "leaked_mb": 0.0, "alloc_retries": 0, "ooms": 0,
            "top_kernel": KERNEL if i % 2 else f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{64 * (i + 1)}x128x64_"
                                               "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        }
        for i, p in enumerate(params())
    })
    return pytester


def gpu_section(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "GPU utilization (pytest-gpuutil)" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start + 1:end]


def table(section: list[str], header_start: str) -> list[str]:
    """The rows of the table whose header starts with ``header_start``."""
    start = next(i for i, line in enumerate(section) if line.startswith(header_start))
    rows = []
    for line in section[start + 2:]:
        if not (line.startswith("…") or line.startswith(FOLDER[:5])):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize("columns", [80, 100, 200])
def test_every_line_fits_and_every_row_shows_both_ends_of_its_parametrization(deep_suite, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run(deep_suite, "--gpu-util", "--gpu-util-top", "0")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=len(params()))
    section = gpu_section(result)
    too_wide = [line for line in section if len(line) > columns]
    assert too_wide == [], "\n".join(section)
    for header in ("test ", "top tests by peak GPU memory"):
        rows = table(section, header)
        assert len(rows) == len(params()), "\n".join(section)
        for param in params():  # both ends of each parametrization id, on exactly one row
            showing = [row for row in rows if param[:3] in row and f"{param[-6:]} " in row + " "]
            assert len(showing) == 1, (param, "\n".join(section))
        assert all(".py::test_model" in row for row in rows), "\n".join(rows)


def test_a_wider_terminal_shows_more_columns(deep_suite, monkeypatch):
    headers = {}
    for columns in (80, 100, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        section = gpu_section(run(deep_suite, "--gpu-util"))
        headers[columns] = next(line for line in section if line.startswith("test ")).split("  ")
        headers[columns] = [h.strip() for h in headers[columns] if h.strip()]
    for essential in ("test", "busy %", "GPU ms", "mm/conv %", "peak MiB"):
        assert all(essential in h for h in headers.values()), headers
    assert len(headers[80]) <= len(headers[100]) < len(headers[200]), headers
    assert {"outcome", "wall ms", "kernels", "top kernel", "attn %"} <= set(headers[200]), headers
    assert "comm %" not in headers[200]  # nothing in it: an optional column without values is left out


def test_verbose_shows_every_column(deep_suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    section = gpu_section(run(deep_suite, "--gpu-util", "-v"))
    header = next(line for line in section if line.startswith("test "))
    for name in ("outcome", "wall ms", "kernels", "top kernel", "attn %", "peak MiB"):
        assert name in header, header


def test_the_totals_line_wraps_at_clause_boundaries(deep_suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    section = gpu_section(run(deep_suite, "--gpu-util"))
    first = next(i for i, line in enumerate(section) if line.startswith("session GPU busy"))
    assert section[first].endswith("of profiled test calls;"), section[first]
    assert section[first + 1].startswith("  8 tests profiled, 0 launched no GPU work"), section[first + 1]
