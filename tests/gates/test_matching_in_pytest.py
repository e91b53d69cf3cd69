"""A comparison that cannot pass by matching nothing: real pytest runs whose node ids could move.

``--gpu-util-dir PATH`` written as two words made pytest take PATH for a test path while it chose
the rootdir (plugin options are not known then): with PATH outside the project the rootdir moved up
and every node id gained the project folder in front. The plugin now chooses again once its options
are known (session/rootdir.py); a rootdir moved otherwise (``--rootdir``) is matched by path suffix.
The records are planted as in test_gates_in_pytest.py (no CUDA here).
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from tests.helpers import PLANT_CONFTEST, TWO_TESTS, busy, output, plant, run  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_torch")


@pytest.fixture
def outside(pytester: pytest.Pytester):
    """A run folder beside the project (not under it), and a baseline ``base`` saved there."""
    folder = pytester.path.parent / f"{pytester.path.name}_out"
    folder.mkdir()
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_why=TWO_TESTS)
    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={folder}", "--gpu-util-save", "base")
    assert result.ret == 0, output(result)
    saved = json.loads(next(folder.glob("baselines/*/base.json")).read_text())
    assert sorted(t["test"] for t in saved["tests"]) == ["test_why.py::test_fast", "test_why.py::test_slow"]
    return folder


def test_two_word_dir_keeps_the_rootdir_and_compares_every_test(pytester, outside):
    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", "--gpu-util-dir", str(outside), "--gpu-util-compare", "base",
                 "--gpu-util-fail", "busy_pct:5")
    text = output(result)
    ids = [t["test"] for t in json.loads((outside / "gpu_util.json").read_text())["tests"]]
    assert ids == ["test_why.py::test_fast", "test_why.py::test_slow"], ids  # pytest alone would have moved them
    result.stdout.fnmatch_lines([f"rootdir: {pytester.path}"])
    assert result.ret == 1, text
    result.stdout.fnmatch_lines(["*test_fast*busy_pct*50*30*-20.0 pts*"])
    assert "0 tests compared" not in text and "leading path" not in text


def test_a_moved_rootdir_is_matched_by_path_suffix_and_said(pytester, outside):
    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={outside}", f"--rootdir={pytester.path.parent}",
                 "--gpu-util-compare", "base", "--gpu-util-fail", "busy_pct:5")
    text = output(result)
    ids = [t["test"] for t in json.loads((outside / "gpu_util.json").read_text())["tests"]]
    assert ids == [f"{pytester.path.name}/test_why.py::test_fast", f"{pytester.path.name}/test_why.py::test_slow"], ids
    assert result.ret == 1, text
    result.stdout.fnmatch_lines(["*test_fast*busy_pct*50*30*-20.0 pts*",
                                 "matched 2 test(s) whose ids differ from the baseline's by a leading path*"])
    assert f"'{pytester.path.name}/' added at the front" in " ".join(text.split())
    assert "0 tests compared" not in text


def test_a_moved_rootdir_without_a_regression_says_how_the_ids_matched(pytester, outside):
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={outside}", f"--rootdir={pytester.path.parent}",
                 "--gpu-util-compare", "base")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*: 2 tests compared",
                                 "matched 2 test(s) whose ids differ*"])


def test_matching_none_of_a_nonempty_baseline_fails(pytester, outside):
    pytester.makepyfile(test_why="def test_other():\n    pass\n")
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={outside}", "--gpu-util-compare", "base")
    assert result.ret == 1, output(result)
    result.stdout.fnmatch_lines(["FAILED: none of this run's 1 test(s) matched the baseline's 2*"])
    assert "no GPU regressions" not in result.stdout.str()


def test_fewer_matches_than_the_baseline_holds_says_how_many_and_why(pytester, outside):
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={outside}", "--gpu-util-compare", "base", "-k", "fast")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*: 1 tests compared"])
    flat = " ".join(result.stdout.str().split())
    assert "1 of the baseline's 2 tests compared: 1 not run here (deselected" in flat
    assert "(e.g. test_why.py::test_slow)" in flat
