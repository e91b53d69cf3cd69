"""Kernel classifier: an ordered table of (category, regex) rules; the first match wins.

The table is data: users prepend their own rules (from the ``gpu_util_kernel_rules`` ini key or
the Python API) and they take precedence over the built-in ones. Each distinct (kind, name) is
classified once and cached on the classifier instance.
"""
from __future__ import annotations

import re

from pytest_gpuutil.frozen import frozen

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Iterable, Sequence

GEMM = "gemm"
CONV = "conv"
ATTENTION = "attention"
COMMUNICATION = "communication"
MEMCPY = "memcpy"
MEMSET = "memset"
FFT = "fft"
LINALG = "linalg"
SORT_SCAN = "sort_scan"
OTHER = "other"

#: Categories in display order (user rules may add more; those sort after these).
CATEGORIES = (
    GEMM,
    CONV,
    ATTENTION,
    COMMUNICATION,
    "triton_pointwise",
    "triton_reduction",
    "triton_persistent_reduction",
    "triton_template",
    FFT,
    LINALG,
    SORT_SCAN,
    "normalization",
    "reduction",
    "elementwise",
    MEMCPY,
    MEMSET,
    OTHER,
)

#: The categories whose union is the "mm/conv %" headline figure.
MM_CONV_CATEGORIES = frozenset({GEMM, CONV})

KERNEL = "kernel"


@frozen
class Rule:
    """Events of one of ``kinds`` whose name matches ``pattern`` (re.search) are ``category``."""

    category: str
    pattern: "re.Pattern[str]"
    kinds: tuple[str, ...] = (KERNEL,)

    def matches(self, kind: str, name: str) -> bool:
        return kind in self.kinds and self.pattern.search(name) is not None


def rule(category: str, regex: str, kinds: Sequence[str] = (KERNEL,)) -> Rule:
    """Build a Rule, with a clear error for a bad category or regex."""
    if not category or not re.fullmatch(r"[A-Za-z0-9_.\-]+", category):
        raise ValueError(f"kernel rule category {category!r}: use letters, digits, '_', '-', '.'")
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise ValueError(f"kernel rule {category}={regex!r}: bad regular expression: {exc}") from None
    return Rule(category, pattern, tuple(kinds))


# Precedence, top to bottom, and why:
# - memcpy/memset are decided by the trace category, never by name.
# - attention before gemm/conv: fmha_cutlass*, FA3 ``cutlass::device_kernel<flash::...>`` and
#   cuDNN ``*_sdpa_*_flash_fprop_*`` contain "cutlass"/"fprop" but are attention.
# - communication before reduction: ``ncclDevKernel_AllReduce_*`` is not a local reduction.
# - conv before gemm: cuDNN convolutions are ``*_fprop_implicit_gemm_*``.
# - gemm covers cuBLAS on Hopper (``nvjet_*``, no "gemm" in the name), xmma/cutlass gemms,
#   split-K reductions and Inductor matmul templates (``triton_tem_fused_mm_*``).
# - Inductor's own kernels (``triton_*``) stay in their triton categories whatever they fuse.
# - fft: cuFFT (``regular_fft_factor``, ``vector_fft``; its R2C/C2R ``pre/postprocess_kernel``
#   take ``real_complex_args_t``). linalg: cuSOLVER/MAGMA factorizations and solvers (getrf, geqr,
#   gesvd, sytrd, stedc, trsm, ...); their GEMMs stay gemm. linalg before sort_scan: cuSOLVER's
#   own ``pegasus*`` sort/scan helpers belong to the factorization that called them.
# - sort_scan: CUB radix sort/scan/unique/select, ATen's sort, cumsum/cumprod and top-k (``mbtopk``).
# - cuDNN SDPA's backward helpers (``compute_dot_do_o``, ``convert_dq_to_16bits``) are attention;
#   LayerNorm/GroupNorm weight-gradient and moment kernels are normalization.
# - ``multi_tensor_apply_kernel`` (ATen's foreach ops, so foreach and fused optimizers) is elementwise.
DEFAULT_RULES: tuple[Rule, ...] = (
    rule(MEMCPY, r"", kinds=("gpu_memcpy",)),
    rule(MEMSET, r"", kinds=("gpu_memset",)),
    rule(ATTENTION, r"(?i)flash|fmha|sdpa|attention|attn|dot_do_o|convert_dq_to"),
    rule(COMMUNICATION, r"(?i)nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"),
    rule(CONV, r"(?i)(?<![a-z])conv(?!ert)|convolution|convolve|implicit_?gemm|fprop|dgrad|wgrad|nchwToNhwc|nhwcToNchw"),
    rule(GEMM, r"^triton_tem_(?:\w*?_)?(?:mm|bmm|addmm|baddbmm|scaled_mm|mm_plus_mm|matmul)(?:_|\d|$)"),
    rule(GEMM, r"(?i)nvjet|gemm|gemv|cutlass|cublas|splitKreduce|matmul"),
    rule("triton_template", r"^triton_tem_"),
    rule("triton_persistent_reduction", r"^triton_per_"),
    rule("triton_reduction", r"^triton_(?:red|spl)_"),
    rule("triton_pointwise", r"^triton_(?:poi|for)_"),
    rule(FFT, r"(?i)fft|real_complex_args_t"),
    rule(LINALG, r"(?i)cusolver|magma_|getrf|getrs|getri|potrf|potrs|potri|geqr|orgqr|ormqr|ungqr|unmqr|gesvd"
                 r"|svd_|syev|heev|sytrd|hetrd|sytrf|stedc|steqr|laed\d|trsm|trsv|trtri|larf[tbg]|lacpy|laswp"
                 r"|lascl|lansy|lange|ipiv|xxtrf|xx_set_info|create_pivot|colperm|batch_eye|offA_stage|FnrmA"
                 r"|setup_vhat|pegasus"),
    rule(SORT_SCAN, r"(?i)radix_?sort|sortKV|bitonic|segmented_?sort|merge_?sort|sort_postprocess"
                    r"|fill_reverse_indices|fill_index_and_segment|DeviceScan|scan_by_key|kernel_scan|scan_innermost"
                    r"|scan_outer|inclusive_?scan|exclusive_?scan|DeviceUnique|unique_by_key|DeviceSelect"
                    r"|DeviceCompact|mbtopk|gatherTopK|topk"),
    rule("normalization", r"(?i)layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|softmax|\bbn_(?:fw|bw)_"
                          r"|GammaBetaBackward|RowwiseMoments|ComputeInternalGradients|Compute(?:Backward)?FusedParams"),
    rule("reduction", r"(?i)reduce_kernel|reduction|ReduceOp"),
    rule("elementwise", r"(?i)elementwise|elemwise|FillFunctor|copy_kernel|multi_tensor_apply"),
)


def parse_rules(text: str, source: str = "gpu_util_kernel_rules") -> tuple[Rule, ...]:
    """Parse ``category=regex`` lines (blank lines and ``#`` comments skipped)."""
    rules = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        category, sep, regex = line.partition("=")
        if not sep:
            raise ValueError(f"{source}: line {number} {line!r}: expected CATEGORY=REGEX")
        try:
            rules.append(rule(category.strip(), regex.strip()))
        except ValueError as exc:
            raise ValueError(f"{source}: line {number}: {exc}") from None
    return tuple(rules)


class KernelClassifier:
    """Classifies GPU events by the first matching rule; each (kind, name) is looked up once."""

    def __init__(self, extra_rules: Iterable[Rule] = (), base_rules: Iterable[Rule] = DEFAULT_RULES):
        self.rules: tuple[Rule, ...] = tuple(extra_rules) + tuple(base_rules)
        self._cache: dict[tuple[str, str], str] = {}

    def with_rules(self, extra_rules: Iterable[Rule]) -> "KernelClassifier":
        """A new classifier whose ``extra_rules`` come before this one's rules."""
        return KernelClassifier(extra_rules, self.rules)

    def classify(self, name: str, kind: str = KERNEL) -> str:
        key = (kind, name)
        category = self._cache.get(key)
        if category is None:
            category = next((r.category for r in self.rules if r.matches(kind, name)), OTHER)
            self._cache[key] = category
        return category


def category_order(names: Iterable[str]) -> list[str]:
    """Sort category names: built-in ones in CATEGORIES order, then the rest alphabetically."""
    rank = {name: i for i, name in enumerate(CATEGORIES)}
    return sorted(set(names), key=lambda n: (rank.get(n, len(rank)), n))
