"""A run's commit and branch: the run's own git commit, the CI's variables, then git."""
from __future__ import annotations

import subprocess

import pytest

from pytest_gpuutil.history.provenance import commit_and_branch


def test_github_pull_request_uses_its_own_branch():
    env = {"GITHUB_SHA": "f00", "GITHUB_REF_NAME": "12/merge", "GITHUB_HEAD_REF": "fix-gemm"}
    assert commit_and_branch({}, env) == ("f00", "fix-gemm")


def test_github_push_uses_the_ref_name_and_the_recorded_commit_wins():
    env = {"GITHUB_SHA": "f00", "GITHUB_REF_NAME": "main", "GITHUB_HEAD_REF": ""}
    assert commit_and_branch({"git_commit": "abc"}, env) == ("abc", "main")


def test_gitlab_variables():
    env = {"CI_COMMIT_SHA": "123", "CI_COMMIT_REF_NAME": "dev"}
    assert commit_and_branch(None, env) == ("123", "dev")


def test_outside_ci_git_is_asked(tmp_path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no git")
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q", "-b", "topic"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert commit_and_branch({}, {}, cwd=str(tmp_path)) == (head, "topic")
    subprocess.run([*git, "checkout", "-q", "--detach"], check=True)
    assert commit_and_branch({}, {}, cwd=str(tmp_path)) == (head, None)  # a detached HEAD has no branch


def test_nothing_known_is_none(tmp_path):
    assert commit_and_branch({}, {}, cwd=str(tmp_path)) == (None, None)
