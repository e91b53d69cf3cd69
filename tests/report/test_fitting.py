"""Names shortened in the middle, tables fitted to a width, and paths as the summary prints them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import pytest

from pytest_gpuutil.report.tables import (
    Column,
    common_prefix,
    fit_table,
    keep_ends,
    shorten,
    shorten_kernel,
    shorten_test_id,
    shorten_test_ids,
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


@pytest.mark.parametrize("ids, prefix", [
    (["tests/test_models.py::test_a[1]", "tests/test_models.py::test_b[2]"], "tests/test_models.py::"),
    (["tests/test_models.py::test_a[1]"], "tests/test_models.py::"),  # one row: its file all the same
    (["t.py::TestC::test_a", "t.py::TestC::test_b"], "t.py::TestC::"),
    (["tests/a/test_x.py::t", "tests/b/test_y.py::u"], "tests/"),
    (["a.py::t[x/y]", "a.py::t[x/z]"], "a.py::"),  # a "/" inside a parametrization id is no folder
    (["a.py::t[x::y]", "a.py::t[x::z]"], "a.py::"),
    (["a.py", "b.py"], ""),
    (["a.py::t", "a.py"], ""),  # nothing of "a.py" would be left
    ([], ""),
])
def test_the_prefix_the_rows_share_ends_at_a_separator(ids, prefix):
    assert common_prefix(ids) == prefix


TIMM = [f"test_model_{kind}[{batch}-{model}]" for kind in ("forward", "backward", "forward_features")
        for batch in (1, 2) for model in ("aimv2_large_patch14_224", "resnet50.a1_in1k",
                                          "vit_large_patch14_clip_quickgelu_336.openai_ft_in12k_in1k")]


@pytest.mark.parametrize("width", [16, 20, 30, 36, 40, 50, 80])
def test_ids_cut_together_fit_and_stay_apart(width):
    for ids in (TIMM, [f"tests/test_models.py::{i}" for i in TIMM], IDS):
        cut = shorten_test_ids(ids, width)
        assert all(len(c) <= width for c in cut) and [c for c, i in zip(cut, ids) if len(i) <= width] == \
            [i for i in ids if len(i) <= width]
        if width >= 36:
            assert len(set(cut)) == len(set(ids)), cut


def test_the_words_that_differ_and_the_parametrization_are_kept_the_shared_words_cut():
    cut = dict(zip(TIMM, shorten_test_ids(TIMM, 36)))
    assert cut["test_model_backward[2-aimv2_large_patch14_224]"] == "…backward[2-aimv2_large_patch14_224]"
    assert cut["test_model_forward[1-aimv2_large_patch14_224]"] == "t…forward[1-aimv2_large_patch14_224]"
    features = cut["test_model_forward_features[1-resnet50.a1_in1k]"]  # one character too long: the model's middle
    assert features.startswith("…forward_features[1-res") and features.endswith(".a1_in1k]") and len(features) == 36
    long = cut["test_model_backward[1-vit_large_patch14_clip_quickgelu_336.openai_ft_in12k_in1k]"]
    assert long.startswith("…backward[1-vit_") and long.endswith("in1k]") and len(long) == 36
    # one test function: its name says nothing, the parametrization gets the room
    one = [f"test_model_forward_backward[{b}-{m}]" for b in (1, 8) for m in ("resnet50_gn_a1h_in1k", "seresnext101_32x8d")]
    assert all(c.endswith(i[i.index("["):]) for c, i in zip(shorten_test_ids(one, 30), one)), shorten_test_ids(one, 30)


def test_a_table_of_test_ids_prints_their_file_once_as_its_caption():
    rows = [Row(f"tests/test_models.py::test_model_{k}[1-aimv2_large_patch14_224]", 5.0, 1.0) for k in ("a", "b")]
    lines = fit_table((Column("test", "test", priority=0, min_width=20, cut=shorten_test_id, test_ids=True),
                       *COLUMNS[1:3]), rows, 80).splitlines()
    assert lines[0] == "tests in tests/test_models.py::"
    assert lines[3].startswith("test_model_a[1-aimv2_large_patch14_224]  ") and "tests/" not in "".join(lines[1:])
    plain = fit_table(COLUMNS[:3], rows, 80).splitlines()  # a column not marked test_ids is left alone
    assert plain[2].startswith("tests/test_models.py::test_model_a")


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
