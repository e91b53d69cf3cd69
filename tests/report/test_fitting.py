"""Names shortened in the middle, tables fitted to a width, and paths as the summary prints them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import pytest

from pytest_gpuutil.report.tables import (
    Column,
    fit_table,
    keep_ends,
    shorten,
    shorten_kernel,
    shorten_test_id,
    split_test_id,
    wrap,
)
from pytest_gpuutil.report.terminal import display_path

DEEP = ("tests/models/vision/backbones/test_resnet_family_forward_backward.py::"
        "test_model_forward_backward[1-resnet50_gn_a1h_in1k]")
IDS = [
    DEEP,
    DEEP.replace("[1-resnet50_gn_a1h_in1k]", "[8-resnet101_clip_gap.openai_ft_in12k_in1k_384]"),
    "tests/a/b/c/test_file.py::TestClass::test_method_with_a_rather_long_name_that_goes_on",
    "tests/a/b/c/test_file.py::test_param[" + "x" * 90 + "-tail]",
    "t.py::test_x",
    "a_folder_name_that_is_long/another_folder_name_that_is_long/test_module_name_long.py",
]


def test_split_test_id():
    assert split_test_id(DEEP) == ("tests/models/vision/backbones/test_resnet_family_forward_backward.py",
                                   "test_model_forward_backward", "[1-resnet50_gn_a1h_in1k]")
    assert split_test_id("a.py::C::test[x::y]") == ("a.py", "C::test", "[x::y]")
    assert split_test_id("a.py") == ("a.py", "", "")
    assert split_test_id("a.py[x]") == ("a.py", "", "[x]")


def test_the_issue_example():
    assert shorten_test_id(DEEP, 200) == DEEP
    cut = shorten_test_id(DEEP, 62)
    assert len(cut) == 62
    assert cut.startswith("…") and cut.endswith("backward.py::test_model_forward_back…[1-resnet50_gn_a1h_in1k]"), cut


@pytest.mark.parametrize("nodeid", IDS)
@pytest.mark.parametrize("width", [20, 30, 36, 40, 50, 61, 64, 80, 120])
def test_a_cut_id_fits_and_keeps_both_ends_of_its_parametrization(nodeid, width):
    cut = shorten_test_id(nodeid, width)
    assert len(cut) <= width
    if len(nodeid) <= width:
        assert cut == nodeid
        return
    path, name, param = split_test_id(nodeid)
    if param:  # both ends of the parametrization id, whatever the width
        assert cut.endswith(param[-3:]) and param[:3] in cut, cut
    if name and width >= 36:  # the test name's start and the file name's end
        assert name[:6] in cut and path[-4:] in cut, cut


def test_ids_of_one_file_stay_apart():
    ids = [DEEP.replace("[1-resnet50_gn_a1h_in1k]", f"[{i}-resnet50_gn_a1h_in1k]") for i in range(6)]
    for width in (36, 40, 61):
        assert len({shorten_test_id(i, width) for i in ids}) == 6


def test_the_param_alone_longer_than_the_width_keeps_both_ends():
    nodeid = "t.py::test_x[" + "abcdefghij" * 10 + "]"
    cut = shorten_test_id(nodeid, 40)
    assert len(cut) == 40 and cut.startswith("t.py::test_x[abc") and cut.endswith("hij]") and "…" in cut


@pytest.mark.parametrize("name, width, expected", [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel_trt",
     50, "sm80_xmma_gemm_f32f32_f32f32…64x64x8…te_kernel_trt"),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma",
     50, "cutlass3x_sm90_tensorop_ge…128x256x64…tive_epi_tma"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
     "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
     110, "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(…)"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 60, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
])
def test_kernel_names_keep_their_start_tile_shape_and_end(name, width, expected):
    cut = shorten_kernel(name, width)
    assert len(cut) <= width
    if len(expected) <= width:
        assert cut == expected


def test_kernels_of_one_family_stay_apart_when_cut():
    names = [f"cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_{tile}_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma"
             for tile in ("128x256x64", "256x128x64", "64x128x64")]
    assert len({shorten_kernel(n, 40) for n in names}) == 3
    assert len({shorten(n, 40) for n in names}) == 1  # the head alone cannot tell them apart


@pytest.mark.parametrize("width", [0, 1, 2, 5])
def test_tiny_widths(width):
    for text in ("abcdefghij", DEEP):
        assert len(shorten(text, width)) <= width and len(keep_ends(text, width)) <= width
        assert len(shorten_test_id(text, width)) <= width and len(shorten_kernel(text, width)) <= width


@dataclass(frozen=True)
class Row:
    test: str
    busy_pct: Optional[float] = None
    gpu_busy_ms: Optional[float] = None
    note: Optional[str] = None


COLUMNS = (
    Column("test", "test", priority=0, min_width=36, fair_width=64, cut=shorten_test_id),
    Column("busy_pct", "busy %", ".1f", priority=1),
    Column("gpu_busy_ms", "GPU ms", ".3f", priority=2),
    Column("note", "a rather wide optional column", priority=20),
)
ROWS = [Row(i, 50.0 + n, 1000.0 * n, "x") for n, i in enumerate(IDS)]


@pytest.mark.parametrize("width", [60, 80, 100, 150, 200])
def test_a_fitted_table_is_never_wider_than_asked(width):
    lines = fit_table(COLUMNS, ROWS, width).splitlines()
    assert max(map(len, lines)) <= width
    assert len(lines) == 2 + len(ROWS)
    assert lines[0].startswith("test ") and "busy %" in lines[0] and "GPU ms" in lines[0]
    assert ("a rather wide optional column" in lines[0]) == (width >= 150)  # optional: where there is room


def test_numbers_are_right_aligned_and_empty_values_empty():
    lines = fit_table(COLUMNS[:3], [Row("a", 5.0, 12.5), Row("b", None, 1234.0)], 80).splitlines()
    assert lines == [
        "test  busy %    GPU ms",
        "----  ------  --------",
        "a        5.0    12.500",
        "b             1234.000",
    ]


def test_an_optional_column_with_no_value_is_left_out():
    lines = fit_table(COLUMNS, [Row("a", 5.0, 1.0)], 200).splitlines()
    assert "optional" not in lines[0]


def test_every_column_with_verbose_even_past_the_width():
    lines = fit_table(COLUMNS, ROWS, 60, every_column=True).splitlines()
    assert "a rather wide optional column" in lines[0]
    assert all(len(line.split("  ")[0]) <= 36 for line in lines[2:])  # the ids at their narrowest


def test_wrap_keeps_words_whole():
    text = "session GPU busy 0.2%: 15.354 ms of GPU work in 7837.817 ms of profiled test calls; 6 tests profiled"
    lines = wrap(text, 40)
    assert all(len(line) <= 40 for line in lines) and lines[1].startswith("  ")
    assert " ".join(line.strip() for line in lines) == text
    assert wrap("/a/very/long/path/that/does/not/break/anywhere/at/all.json", 20) == [
        "/a/very/long/path/that/does/not/break/anywhere/at/all.json"]


def test_paths_relative_under_the_working_directory_absolute_elsewhere(tmp_path):
    work = tmp_path / "work"
    (work / ".gpu_util").mkdir(parents=True)
    assert display_path(work / ".gpu_util" / "gpu_util.csv", cwd=work) == os.path.join(".gpu_util", "gpu_util.csv")
    assert display_path(".gpu_util/x.json", cwd=work) == os.path.join(".gpu_util", "x.json")
    assert display_path(work, cwd=work) == "."
    outside = tmp_path / "elsewhere" / "gpu_util.csv"
    assert display_path(outside, cwd=work) == str(outside)  # not ../elsewhere/gpu_util.csv
    assert display_path("/tmp/gu_s/gpu_util.csv", cwd=work) == "/tmp/gu_s/gpu_util.csv"
    assert display_path(tmp_path / "work2" / "a", cwd=work) == str(tmp_path / "work2" / "a")  # a prefix is not a parent
