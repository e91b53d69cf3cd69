"""Why a test regressed, from two saved records: kernel matching, shares, the 4-line bound, the JSON form."""
from __future__ import annotations

import math

import pytest

from pytest_gpuutil.gates.explain import TERMINAL_LINES, explain
from pytest_gpuutil.gates.kernel_families import family_of, short_name
from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.records import TestRecord

BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
BF16_OTHER_TILE = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopB_NNT"
FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<float, "
       "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")
FUSED = "triton_poi_fused_add_mul_0"


def rec(kernels, gpu_ms, wall_ms, test="t.py::test_x", **more) -> TestRecord:
    return TestRecord(test, "passed", gpu_busy_ms=gpu_ms, wall_ms=wall_ms, kernels=tuple(kernels), **more)


def test_gemm_variants_of_one_precision_are_one_family_and_a_precision_change_is_a_shift():
    c = KernelClassifier()
    assert family_of(BF16, c) == family_of(BF16_OTHER_TILE, c) == "gemm bf16/fp16"
    assert family_of(FP32, c) == "gemm fp32 (no TF32)"
    why = explain(rec([(BF16, 10, 5200.0)], 5.4, 8.0), rec([(FP32, 10, 80800.0)], 81.0, 84.0))
    first = why.differences[0]
    assert first.kind == "shift" and first.name == "gemm bf16/fp16 -> fp32 (no TF32)"
    assert first.text.startswith("+75.6 ms: gemm bf16/fp16 -> fp32 (no TF32) (5.20 -> 80.80 ms, x10 -> x10)")
    assert why.explained_pct >= 99


def test_a_tile_change_alone_is_a_slower_gemm_not_new_and_gone():
    why = explain(rec([(BF16, 10, 5000.0)], 5.0, 6.0), rec([(BF16_OTHER_TILE, 10, 19000.0)], 19.0, 20.0))
    assert [d.kind for d in why.differences] == ["slower"]
    assert why.differences[0].share_pct == 100.0


def test_a_fused_op_split_in_two_names_the_new_kernel_with_its_count_and_the_gone_one():
    before = rec([(BF16, 10, 2000.0), (FUSED, 200, 1000.0)], 3.0, 4.0)
    after = rec([(BF16, 10, 2000.0), (MUL, 200, 9800.0), ("triton_poi_fused_add_1", 200, 1000.0)], 12.8, 14.0)
    why = explain(before, after, ["gpu_busy_ms"])
    assert why.first_line.startswith("+9.8 ms: new kernel `vectorized_elementwise_kernel<...MulFunctor...>` x200 (was absent)")
    assert short_name(MUL) == "vectorized_elementwise_kernel<...MulFunctor...>"
    kinds = {d.kind for d in why.differences}
    assert {"new kernel", "kernel gone"} <= kinds
    lines = why.terminal_lines(100)
    assert len(lines) <= TERMINAL_LINES and all(len(line) <= 100 for line in lines)
    data = why.to_dict()
    assert data["first_line"] == why.first_line and data["differences"][0]["count_after"] == 200


def test_host_waits_explain_idle_time_when_the_gpu_work_is_unchanged():
    wait = {"rule": "host-sync", "evidence": {"waits": 200, "idle_after_us": 6000.0}, "places": [{"file": "t.py", "line": 12}]}
    before = rec([(BF16, 200, 3000.0)], 3.0, 4.0, findings=(), kernel_count=200)
    after = rec([(BF16, 200, 3000.0), ("Memcpy DtoH (Device -> Pageable)", 200, 200.0)], 3.2, 10.5,
                findings=(wait,), kernel_count=400)
    why = explain(before, after, ["busy_pct"])
    assert why.differences[0].kind == "host waits"
    assert why.first_line.startswith("+6.0 ms: host waits x0 -> x200")
    assert why.explained_pct >= 80
    assert any(d.kind == "new finding" and d.place == "t.py:12" for d in why.differences)


def test_pinned_to_pageable_is_a_memcpy_shift():
    before = rec([("Memcpy HtoD (Pinned -> Device)", 10, 1000.0)], 1.0, 2.0)
    after = rec([("Memcpy HtoD (Pageable -> Device)", 10, 4000.0)], 4.0, 5.0)
    assert explain(before, after).first_line.startswith("+3.0 ms: memcpy pinned/device -> pageable")


def test_no_kernels_recorded_still_gives_an_answer():
    why = explain(rec([], 1.0, 2.0), rec([], 5.0, 6.0))
    assert why.differences == () and why.explained_pct == 0
    assert why.first_line == "no difference in the kernels or waits recorded"


def test_records_keep_short_names_and_the_time_that_matters():
    from pytest_gpuutil.gates.kernel_families import OTHERS, compact_kernels

    rows = [(MUL, 200, 9800.0), ("Memcpy HtoD (Pageable -> Device)", 10, 4000.0), (FP32, 10, 80800.0)]
    rows += [(f"tiny_kernel_{i}", 1, 1.0) for i in range(30)]
    kept = compact_kernels(rows)
    assert kept[0] == (FP32[:80], 10, 80800.0)
    assert kept[1] == ("vectorized_elementwise_kernel<...MulFunctor...>", 200, 9800.0)
    assert kept[2] == ("Memcpy HtoD (Pageable -> Device)", 10, 4000.0)
    assert kept[-1] == (OTHERS, 30, 30.0) and len(kept) == 4
    record = TestRecord("t::x", "passed", kernels=kept)
    assert record.to_dict()["kernels"][2] == "10 4000 Memcpy HtoD (Pageable -> Device)"
    assert TestRecord.from_dict(record.to_dict()).kernels == kept


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::addcmul_cuda_kernel("
     "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda(float, float, float)#1}, "
     "std::array<char*, 4ul> >(int, std::array<char*, 4ul>)", "vectorized_elementwise_kernel<...addcmul_cuda_kernel...>"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
     "unsigned int, float, 4> >(at::native::ReduceOp<float>)", "reduce_kernel<...MeanOps...>"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >"
     "(at::TensorIteratorBase&)::{lambda(int)#1}>(int)", "elementwise_kernel<...CUDAFunctor_add...>"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
])
def test_short_names_keep_what_the_kernel_computes(name, short):
    assert short_name(name) == short


def test_round_tenth_is_round_to_one_decimal_bit_for_bit():
    import random
    import struct

    from pytest_gpuutil.gates.kernel_families import round_tenth

    rng = random.Random(41)
    values = [0.0, -0.0, 0.04, -0.04, 0.05, -0.05, 0.15, 0.25, -0.25, 2.5, 1.5, 2.675, 1e8, -1e8, 1e8 - 0.05,
              math.inf, -math.inf, math.nan, 5e-324, 1e300]
    values += [rng.randint(0, 10**9) / 1000 for _ in range(20000)]  # µs from ns: three decimals
    values += [(rng.randint(-10**6, 10**6) + 0.5) / 10 for _ in range(5000)]  # ties at the second decimal
    values += [math.nextafter((rng.randint(0, 10**5) + 0.5) / 10, rng.choice([0.0, 1e9])) for _ in range(5000)]
    values += [math.ldexp(rng.random(), rng.randint(-60, 40)) * rng.choice([1, -1]) for _ in range(20000)]
    for value in values:
        got, want = round_tenth(value), round(value, 1)
        assert struct.pack("d", got) == struct.pack("d", want) or (math.isnan(got) and math.isnan(want)), value


@pytest.mark.parametrize("total_us", [0.0, -1.0, 0.04, 7.25, math.inf, math.nan])
def test_one_kernel_is_kept_whatever_its_time(total_us):
    from pytest_gpuutil.gates.kernel_families import compact_kernels

    (kept,) = compact_kernels([("void k<1>(int)", 3, total_us)])
    assert kept[0] == "k<...>" and kept[1] == 3
    assert repr(kept[2]) == repr(round(total_us, 1))


def _rows_of_every_shape(rng):
    """Kernel rows as flushes give them and beyond: one to forty rows, ties, zeros, negative and
    large times, times at a tenth's tie, long tails past KEPT_ROWS, the same name twice."""
    names = [MUL, FP32, BF16, FUSED, "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "void k<1>(int)"]
    names += [f"tiny_kernel_{i}" for i in range(30)]
    shapes = []
    for _ in range(3000):
        n = rng.choice([1, 2, 3, 4, 5, 16, 17, 18, 25, 40])
        times = rng.choice([
            lambda: rng.randint(0, 10**9) / 1000,
            lambda: (rng.randint(-10**4, 10**4) + 0.5) / 10,
            lambda: rng.choice([0.0, 1.0, 2.5, 0.05, 0.25]),
            lambda: math.ldexp(rng.random(), rng.randint(-30, 40)),
        ])
        shapes.append([(rng.choice(names), rng.randint(1, 10**6), times()) for _ in range(n)])
    return shapes


def test_compact_kernels_in_c_gives_the_same_tuples_as_python():
    import random
    import struct

    from pytest_gpuutil.gates import kernel_families as kf

    if kf._COMPACT is None:
        pytest.skip("gates/_record_parts.c is not built here")
    from pytest_gpuutil.gates import _record_parts as _compact

    assert (_compact.KEPT_ROWS, _compact.KEPT_SHARE, _compact.OTHERS) == (kf.KEPT_ROWS, kf.KEPT_SHARE, kf.OTHERS)

    def exact(kept):
        return [(name, type(count), count, struct.pack("d", total)) for name, count, total in kept]

    rng = random.Random(41)
    took_c = 0
    for rows in _rows_of_every_shape(rng):
        got = kf._COMPACT(rows, kf.stored_name)
        assert got is not None
        took_c += 1
        assert type(got) is tuple and all(type(row) is tuple for row in got)
        assert exact(got) == exact(kf.compact_kernels_py(rows)), rows
        assert exact(kf._COMPACT(tuple(rows), kf.stored_name)) == exact(got)
    assert took_c == 3000


@pytest.mark.parametrize("rows", [
    [("k", 1, math.nan), ("j", 2, 1.0)],
    [("k", 1, math.inf), ("j", 2, 1.0)],
    [("k", 1, 2), ("j", 2, 1.0)],
    [("k", 1.0, 2.0), ("j", 2, 1.0)],
    [["k", 1, 2.0], ("j", 2, 1.0)],
    [("k", True, 2.0)],
])
def test_compact_kernels_leaves_rows_it_cannot_take_to_python(rows):
    from pytest_gpuutil.gates import kernel_families as kf

    if kf._COMPACT is None:
        pytest.skip("gates/_record_parts.c is not built here")
    assert kf._COMPACT(rows, kf.stored_name) is None
    assert kf._COMPACT(iter(rows), kf.stored_name) is None
    assert repr(kf.compact_kernels(rows)) == repr(kf.compact_kernels_py(rows))
