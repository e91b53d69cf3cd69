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


def table(section: list[str], header_start: str, count: int) -> tuple[str, list[str]]:
    """The caption (the line above the header) and the ``count`` rows of the table whose header
    starts with ``header_start``."""
    start = next(i for i, line in enumerate(section) if line.startswith(header_start))
    assert set(section[start + 1]) <= {"-", " "}, section[start + 1]
    return section[start - 1], section[start + 2:start + 2 + count]


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
        caption, rows = table(section, header, len(params()))
        assert caption == f"tests in {FOLDER}/{FILE}::", "\n".join(section)  # the file, once
        for param in params():  # both ends of each parametrization id, on exactly one row
            showing = [row for row in rows if param[:3] in row and f"{param[-6:]} " in row + " "]
            assert len(showing) == 1, (param, "\n".join(section))
        assert not any(FILE[:-3] in row or FILE[-8:] in row for row in rows), "\n".join(rows)


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


# -- timm's suite: two test functions, models as parametrization ids, no GPU memory ------------------

TIMM_MODELS = ["aimv2_large_patch14_224", "convnext_tiny.fb_in22k", "eva02_base_patch14_448", "resnet50.a1_in1k"]
TIMM_SUITE = f"""
import pytest

@pytest.mark.parametrize("model", {TIMM_MODELS!r})
@pytest.mark.parametrize("batch", [1, 2])
def test_model_forward(batch, model):
    pass

@pytest.mark.parametrize("model", {TIMM_MODELS!r})
@pytest.mark.parametrize("batch", [1, 2])
def test_model_backward(batch, model):
    pass
"""
TIMM_IDS = [(kind, f"[{b}-{m}]") for kind in ("forward", "backward") for m in TIMM_MODELS for b in (1, 2)]


@pytest.fixture
def timm_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """timm's tests/test_models.py as the issue met it: a launch-bound suite that allocates no GPU memory."""
    pytester.makeconftest(PLANT_CONFTEST)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_models.py").write_text(TIMM_SUITE)
    idle = {"rule": "launch-bound", "severity": "high", "message": "2,000 kernels, median 2.0 µs", "fix": "graphs",
            "impact_pct": 80.0, "evidence": {}}
    plant(pytester, **{
        f"test_model_{kind}{param}": {
            "busy_pct": 3.0 + i, "gpu_busy_ms": 10.0 * (i + 1), "mm_conv_pct": 1.0, "kernel_count": 2000 + i,
            "wall_ms": 300.0, "peak_alloc_mb": 0.0, "peak_reserved_mb": 0.0, "leaked_mb": 0.0, "alloc_retries": 0,
            "ooms": 0, "top_kernel": "void at::native::vectorized_elementwise_kernel<4>(int)",
            "findings": [dict(idle, impact_pct=80.0 - i, saving_ms=50.0 - i, saving_pct=16.0)],
        }
        for i, (kind, param) in enumerate(TIMM_IDS)
    })
    return pytester


def test_timm_ids_at_80_columns_keep_forward_or_backward_and_the_model(timm_suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = run(timm_suite, "--gpu-util", "--gpu-util-top", "0")
    assert result.ret == 0, output(result)
    section = gpu_section(result)
    assert [line for line in section if len(line) > 80] == [], "\n".join(section)
    caption, rows = table(section, "test ", len(TIMM_IDS))
    assert caption == "tests in tests/test_models.py::", "\n".join(section)  # printed once ...
    assert not any("test_models" in row for row in rows), "\n".join(section)  # ... and cut from the rows
    for kind, param in TIMM_IDS:  # the function's own word and the whole parametrization id, on exactly one row
        showing = [row for row in rows if f"{kind}{param}" in row]
        assert len(showing) == 1, (kind, param, "\n".join(rows))


def test_an_all_zero_memory_table_is_one_line(timm_suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    section = gpu_section(run(timm_suite, "--gpu-util"))
    memory = [line for line in section if "peak GPU memory" in line or "reserved MiB" in line]
    assert memory == ["top tests by peak GPU memory: none, every peak is 0.0 MiB (16 tests measured)"], "\n".join(section)
    assert sum(line.startswith("tests in ") for line in section) == 2, "\n".join(section)  # top tests, findings


def test_findings_lines_print_the_shared_file_once_and_keep_what_differs(timm_suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = run(timm_suite, "--gpu-util").stdout.lines
    start = next(i for i, line in enumerate(lines) if "findings: what to fix" in line)
    findings = lines[start + 1:next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))]
    caption = findings.index("tests in tests/test_models.py::")
    assert findings[caption - 1].startswith("worst tests"), "\n".join(findings)  # the worst tests' caption
    assert not any("test_models" in line for line in findings[caption + 1:]), "\n".join(findings)
    listed = findings[caption + 1:caption + 4]
    assert all(line.endswith("launch-bound") for line in listed), "\n".join(findings)
    assert all(len(line) <= 80 for line in findings), "\n".join(findings)
    for (kind, param), line in zip(TIMM_IDS, listed):  # the worst three: the first three planted
        assert f"{kind}{param}  launch-bound" in line, "\n".join(findings)
