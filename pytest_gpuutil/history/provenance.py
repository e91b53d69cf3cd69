"""Where a run came from: its commit and branch, from the CI environment or from git."""
from __future__ import annotations

import os
import subprocess
from typing import Any, Mapping, Optional

#: (commit variable, branch variables in order) of CI systems; the first set variable wins
CI_VARIABLES = (
    ("GITHUB_SHA", ("GITHUB_HEAD_REF", "GITHUB_REF_NAME")),  # GITHUB_HEAD_REF: a pull request's own branch
    ("CI_COMMIT_SHA", ("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "CI_COMMIT_REF_NAME")),  # GitLab
    ("BUILDKITE_COMMIT", ("BUILDKITE_BRANCH",)),
    ("GIT_COMMIT", ("GIT_BRANCH",)),  # Jenkins
)


def _git(args: list[str], cwd: Optional[str]) -> Optional[str]:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def commit_and_branch(machine_info: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                      cwd: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """(commit, branch) of a run: the commit its machine_info recorded, else the CI's, else git's; the
    branch from the CI's variables, else git's (None on a detached HEAD)."""
    env = os.environ if environ is None else environ
    recorded = (machine_info or {}).get("git_commit")
    commit = recorded if isinstance(recorded, str) and recorded else None
    branch = None
    for commit_var, branch_vars in CI_VARIABLES:
        if commit is None and env.get(commit_var):
            commit = env[commit_var]
        if branch is None:
            branch = next((env[v] for v in branch_vars if env.get(v)), None)
    if commit is None:
        commit = _git(["rev-parse", "HEAD"], cwd)
    if branch is None:
        branch = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
        branch = None if branch == "HEAD" else branch
    return commit, branch
