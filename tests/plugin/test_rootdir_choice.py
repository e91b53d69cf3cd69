"""Which words are this plugin's option values (kept out of pytest's rootdir choice: session/rootdir.py)."""
from __future__ import annotations

from pytest_gpuutil.session.rootdir import _valued_words


def test_values_written_as_words_of_their_own():
    assert _valued_words(["--gpu-util-dir", "out", "tests/"]) == {"out"}
    assert _valued_words(["--gpu-util-fail", "busy_pct:5", "--gpu-util-save", "main"]) == {"busy_pct:5", "main"}


def test_values_after_an_equals_sign_or_after_a_double_dash_are_not():
    assert _valued_words(["--gpu-util-dir=out", "tests/"]) == set()
    assert _valued_words(["--", "--gpu-util-dir", "out"]) == set()
    assert _valued_words(["--gpu-util-compare", "main"]) == set()  # an optional value: keep_test_paths' job
