"""The HTML page for fixed run documents is the golden page, byte for byte (tests/data/html_golden/)."""
from __future__ import annotations

import pytest

from tests.helpers.html_golden import CASES, UPDATE_COMMAND, Case, first_difference, golden, render


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_page_is_the_golden_page(case: Case) -> None:
    page, want = render(case), golden(case)
    if page != want:
        pytest.fail(f"the HTML page for {case.name} is not {case.page.name}: {first_difference(page, want)}. "
                    f"If the change to the page is intended, run `{UPDATE_COMMAND}` and commit the golden files.",
                    pytrace=False)


def test_the_golden_pages_are_different_pages() -> None:
    """Each case shows something the others do not (a baseline, links to traces, other runs)."""
    pages = {c.name: golden(c) for c in CASES}
    assert len(set(pages.values())) == len(CASES)
    # 5 tests planted worse; 2 of them by less than the gates' 1 ms noise floor of GPU or idle time
    assert b'class="verdict bad">6 regression(s) in 3 test(s)' in pages["synthetic_vs_baseline"]
    assert b'class="verdict good">no regressions' in pages["h200_vs_baseline"]
    assert b'"tr":"traces/examples_test_gpu_workloads.py_test_scaled_dot_product_attention.json.gz"' in pages["h100"]
    assert b'<template id="more-rows">' in pages["synthetic"] and b"GPUs and workers" in pages["h200_two_gpus"]
    assert b'id="gu-timelines"' in pages["planted_timeline"]
    assert not any(b'id="gu-timelines"' in page for name, page in pages.items() if name != "planted_timeline")
