"""The CUDA context helpers never raise: here (no CUDA driver loaded, or no context) they do nothing."""
from __future__ import annotations

import threading

import pytest

from pytest_gpuutil.hardware.cuda_context import current_context, make_current
from tests.helpers import HAS_CUDA


def test_without_a_current_context_there_is_nothing_to_make_current() -> None:
    if not HAS_CUDA:
        assert current_context() is None
    assert make_current(None) is False


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_a_context_taken_on_one_thread_is_current_on_another_on_a_gpu() -> None:
    import torch

    torch.zeros(1, device="cuda")
    ctx = current_context()
    assert ctx is not None
    seen = []

    def other() -> None:
        seen.append((current_context(), make_current(ctx), current_context()))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [(None, True, ctx)]
