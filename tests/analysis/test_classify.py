"""Kernel classification: the Hopper naming families, precedence, user rules."""
from __future__ import annotations

import pytest

from pytest_gpuutil.analysis.classify import (
    DEFAULT_RULES,
    KernelClassifier,
    parse_rules,
    rule,
)

HOPPER_NAMES = [
    # cuBLAS on Hopper: no "gemm" in the name
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "gemm"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4::Params)", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, false>(cublasLt::cublasSplitKParams<float>)", "gemm"),
    ("triton_tem_fused_mm_relu_0", "gemm"),
    ("triton_tem_fused_addmm_1", "gemm"),
    ("triton_tem_mm_0", "gemm"),
    # attention, including names that contain "cutlass" or "fprop"
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t>>", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention"),
    ("fmha_cutlassB_f16_aligned_64x64_k64_sm80", "attention"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<>>>>(flash::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    # convolution
    ("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x32x64_stage1_warpsize4x1x1_g1_tensor16x8x8_execute_kernel_", "conv"),
    ("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "conv"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn", "conv"),
    ("_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS_4gemm11threadblock22ImplicitGemmMultistageE", "conv"),
    ("void precomputed_convolve_sgemm<float, 1024, 5, 5, 4, 3, 3, 1, false>(int, int, int, float const*, int, float*)", "conv"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>)", "conv"),
    # communication
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "communication"),
    # Inductor
    ("triton_poi_fused_add_0", "triton_pointwise"),
    ("triton_red_fused_sum_1", "triton_reduction"),
    ("triton_per_fused_add_mean_mul_relu_sum_0", "triton_persistent_reduction"),
    ("triton_tem_fused_0", "triton_template"),
    # the rest
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*)", "normalization"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >", "elementwise"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct)", "normalization"),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1, true>(float, float)", "normalization"),
    ("void elemWiseRNNcell<float, float, float, (cudnnRNNMode_t)2, (cudnnRNNBiasMode_t)2>(int, int)", "elementwise"),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other"),
    ("void convert_fp8_kernel(float const*, unsigned char*)", "other"),
]


@pytest.mark.parametrize("name, category", HOPPER_NAMES)
def test_hopper_names(name, category):
    assert KernelClassifier().classify(name) == category


@pytest.mark.parametrize("kind, category", [("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")])
def test_memcpy_and_memset_by_kind_not_name(kind, category):
    assert KernelClassifier().classify("Memcpy HtoD (Pinned -> Device)", kind) == category
    assert KernelClassifier().classify("nvjet_lookalike", kind) == category


def test_seed_substring_rule_would_miss_nvjet():
    """Why this classifier exists: gemm|conv|cutlass|wgrad finds nothing in a Hopper bf16 matmul."""
    import re

    seed = re.compile("gemm|conv|cutlass|wgrad")
    assert not seed.search("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert seed.search("fmha_cutlassF_f16_aligned_64x64_rf_sm80")  # and it calls attention a matmul


def test_user_rules_come_first():
    classifier = KernelClassifier(parse_rules("# mine\nmy_gemm = ^nvjet_\n\nspin=spin_kernel"))
    assert classifier.classify("nvjet_sm90_tst_x") == "my_gemm"
    assert classifier.classify("at::cuda::spin_kernel(long)") == "spin"
    assert classifier.classify("fmha_cutlassF_x") == "attention"
    assert classifier.rules[-len(DEFAULT_RULES):] == DEFAULT_RULES


def test_with_rules_prepends_and_leaves_original_alone():
    base = KernelClassifier()
    custom = base.with_rules([rule("gemm", r"^my_op")])
    assert custom.classify("my_op_kernel") == "gemm"
    assert base.classify("my_op_kernel") == "other"


def test_each_name_classified_once():
    classifier = KernelClassifier()
    classifier.classify("nvjet_sm90_a")
    classifier.rules = ()  # a second lookup must come from the cache, not the (now empty) rules
    assert classifier.classify("nvjet_sm90_a") == "gemm"


@pytest.mark.parametrize(
    "text, message",
    [
        ("no_equals_sign", "line 1 'no_equals_sign': expected CATEGORY=REGEX"),
        ("gemm=(unclosed", "bad regular expression"),
        ("bad category=x", "use letters, digits"),
    ],
)
def test_bad_rules_name_the_line(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_rules(text)
