"""Example GPU suite: every test in this folder is skipped where no CUDA GPU is available."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SKIP_REASON = "needs a CUDA GPU"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in Path(str(item.path)).resolve().parents]
    if not mine or _cuda_available():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in mine:
        item.add_marker(skip)
