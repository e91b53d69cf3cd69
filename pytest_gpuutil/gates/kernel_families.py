"""Kernels of two runs matched despite the noise in their names: families, labels and short names.

The rule (docs/ci.md, "How kernels are matched"): a GEMM or convolution kernel (the classifier's
``gemm``/``conv``) belongs to the family of its category and precision, whatever cuBLAS, nvjet or
CUTLASS variant (tile, stages, cluster) ran: ``gemm fp32 (no TF32)``, ``gemm tf32``,
``gemm bf16/fp16``; a copy belongs to its direction and host memory (``memcpy HtoD pageable``);
any other kernel to its name without the argument list and with the numbers in its template
arguments blanked (``elementwise_kernel<#, #, …>``), so a launch configuration's change does not
make a new kernel, while a different functor or a different kernel does.
"""
from __future__ import annotations

import functools
import math
import operator
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from pytest_gpuutil.analysis.classify import CONV, GEMM, KernelClassifier
from pytest_gpuutil.analysis.rules import is_fp32_gemm

_NUMBER = re.compile(r"\b\d+(?:ul|u|l)?\b")
_SPACES = re.compile(r"\s+")
_COPY = re.compile(r"(?i)^memcpy\s+(\w+)")
#: identifiers in template arguments that say what an elementwise or reduction kernel computes
_FUNCTOR = re.compile(r"[A-Za-z_]\w*(?:Functor|Ops?|_kernel_cuda|_cuda_kernel|_impl|_kernel)\b\w*|CUDAFunctor_\w+")
_GENERIC_FUNCTOR = re.compile(r"^(?:Binary|Unary|AUnary|BUnary|Func|Reduce|OffsetCalculator)")


@dataclass(frozen=True)
class KernelTotal:
    """One family's GPU time in one run."""

    family: str
    label: str
    #: the family's name with the most time (what is shown)
    name: str
    count: int
    total_us: float


def precision(name: str) -> str:
    """A GEMM or convolution kernel's precision as its name tells it."""
    if is_fp32_gemm(name, GEMM):
        return "fp32 (no TF32)"
    lowered = name.lower()
    if "tf32" in lowered:
        return "tf32"
    if "f64" in lowered or "dgemm" in lowered:
        return "fp64"
    if re.search(r"(?i)e4m3|e5m2|fp8", name):
        return "fp8"
    return "bf16/fp16"


def _strip_arguments(name: str) -> str:
    """``void f<T>(int, float*)`` as ``f<T>``."""
    text = name[5:] if name.startswith("void ") else name
    if text.endswith(")"):
        depth = 0
        for index in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[index], 0)
            if depth == 0:
                return text[:index] if index > 0 else text
    return text


def label_of(name: str, classifier: KernelClassifier) -> str:
    """The category a difference is shown under: ``gemm bf16/fp16``, ``memcpy pageable``, ``elementwise``."""
    if name.startswith("Memcpy"):
        return "memcpy pageable" if "Pageable" in name else "memcpy pinned/device"
    if name.startswith("Memset"):
        return "memset"
    category = classifier.classify(name)
    return f"{category} {precision(name)}" if category in (GEMM, CONV) else category


def family_of(name: str, classifier: KernelClassifier) -> str:
    """The key two runs' kernels are matched by (see the module's rule)."""
    if name.startswith("Memcpy"):
        copy = _COPY.match(name)
        return f"memcpy {copy.group(1) if copy else ''} {'pageable' if 'Pageable' in name else 'pinned/device'}"
    if name.startswith("Memset"):
        return "memset"
    label = label_of(name, classifier)
    if label.startswith((GEMM + " ", CONV + " ")):
        return label
    return _SPACES.sub(" ", _NUMBER.sub("#", _strip_arguments(name)))


def short_name(name: str, width: int = 60) -> str:
    """A kernel name as a difference shows it: ``vectorized_elementwise_kernel<...MulFunctor...>``."""
    text = _strip_arguments(name)
    head, sep, rest = text.partition("<")
    head = head.rsplit("::", 1)[-1]
    if sep:
        hints = [h for h in _FUNCTOR.findall(rest) if not _GENERIC_FUNCTOR.match(h)]
        hint = hints[-1].rsplit("::", 1)[-1] if hints else ""
        text = f"{head}<...{hint}...>" if hint else f"{head}<...>"
    else:
        text = head
    if name.startswith("Memcpy") or name.startswith("Memset"):
        text = name
    return text if len(text) <= width else text[: width - 3] + "..."


def family_totals(kernels: Iterable[tuple[str, int, float]], classifier: Optional[KernelClassifier] = None
                  ) -> dict[str, KernelTotal]:
    """A record's ``kernels`` summed per family (the name with the most time names it)."""
    classifier = classifier or KernelClassifier()
    out: dict[str, KernelTotal] = {}
    best: dict[str, float] = {}
    for name, count, total_us in kernels:
        family = family_of(name, classifier)
        known = out.get(family)
        if known is None:
            out[family] = KernelTotal(family, label_of(name, classifier), name, int(count), float(total_us))
            best[family] = float(total_us)
            continue
        top = name if float(total_us) > best[family] else known.name
        best[family] = max(best[family], float(total_us))
        out[family] = KernelTotal(family, known.label, top, known.count + int(count), known.total_us + float(total_us))
    return out


#: a record keeps the kernels that make this share of its kernel time, at most KEPT_ROWS of them
KEPT_SHARE = 0.99
KEPT_ROWS = 16
NAME_WIDTH = 80
#: the row that sums the kernels left out: ``(N other kernels)``
OTHERS = "(other kernels)"


def compact_kernels(rows: Iterable[tuple[str, int, float]]) -> tuple[tuple[str, int, float], ...]:
    """A record's ``kernels`` from every (name, count, µs) of its call, most time first: short names
    (gemm and convolution names kept whole up to NAME_WIDTH, so their precision still reads), the
    rows that make KEPT_SHARE of the time (at most KEPT_ROWS), the rest summed in one OTHERS row.
    In C where it is built (gates/_record_parts.c: rows of exact (str, int, float) with finite times, the
    same tuples), else :func:`compact_kernels_py`."""
    if _COMPACT is not None:
        done = _COMPACT(rows, stored_name)
        if done is not None:
            return done
    return compact_kernels_py(rows)


def compact_kernels_py(rows: Iterable[tuple[str, int, float]]) -> tuple[tuple[str, int, float], ...]:
    """:func:`compact_kernels` in Python (any rows: ints for counts, floats or ints for times)."""
    ordered = [(n, int(c), float(t)) for n, c, t in rows]
    if len(ordered) == 1:  # one kernel (the call of many a test): kept whatever its time, as the loop keeps it
        name, count, total_us = ordered[0]
        return ((stored_name(name), count, round_tenth(total_us)),)
    ordered.sort(key=_total_us, reverse=True)  # most time first; a stable sort, as sorting by -total_us
    total = sum([t for _, _, t in ordered])
    enough = KEPT_SHARE * total if total > 0 else math.inf
    kept: list[tuple[str, int, float]] = []
    covered = 0.0
    for name, count, total_us in ordered:
        if len(kept) >= KEPT_ROWS or covered >= enough:
            break
        kept.append((stored_name(name), count, round_tenth(total_us)))
        covered += total_us
    if len(kept) == len(ordered):
        return tuple(kept)
    rest = ordered[len(kept):]
    if rest:
        kept.append((OTHERS, sum(c for _, c, _ in rest), round(sum(t for _, _, t in rest), 1)))
    return tuple(kept)


_total_us = operator.itemgetter(2)


def round_tenth(value: float) -> float:
    """``round(value, 1)``, the same float, without its decimal conversion (~3k instructions a call)
    where ``value × 10`` is well away from a tie: the integer nearest to the exact ``value × 10`` is
    then the nearest to its float, and ``r / 10`` is the float nearest to ``r`` tenths (int division
    rounds correctly), which is what ``round`` returns. Zero (its sign), ties, huge values, inf and
    NaN go to ``round`` itself."""
    if -1e8 < value < 1e8:
        tenths = value * 10.0  # within 1e-7 of the exact product here
        nearest = round(tenths)
        if nearest and abs(tenths - nearest) < 0.4999:
            return nearest / 10
    return round(value, 1)


@functools.lru_cache(maxsize=4096)  # a suite's kernels repeat: each test's record names them again
def stored_name(name: str) -> str:
    """The name a record keeps: ``short_name`` (templates as their functor), copies and GEMMs as they are."""
    if name.startswith(("Memcpy", "Memset")):
        return name[:NAME_WIDTH]
    if "<" not in name:
        text = _strip_arguments(name)
        return text if len(text) <= NAME_WIDTH else text[:NAME_WIDTH]
    return short_name(name, NAME_WIDTH)


try:  # a record's kernels in C (gates/_record_parts.c, built at install where a C compiler is found)
    from pytest_gpuutil.gates._record_parts import compact as _COMPACT
except ImportError:  # pragma: no cover - without a compiler: compact_kernels_py
    _COMPACT = None
