"""The CI recipes of docs/ci.md (and the release workflow of docs/contributing.md) as a CI would read them.

Every YAML block parses; every install line installs the plugin as a package (``pytest-gpuutil``),
not only the user's project (``pip install -e .``); and the recipes' own commands run here, as far
as a CPU machine can: each job's ``run:`` steps in order in a small project, on the main branch and
then on a pull request (GitHub Actions' ``if:`` conditions and ``${{ }}`` expressions evaluated for
each), GitLab's script with its branch variables, the shards' merge, history and gate included.
The install lines are checked, not run (the plugin is installed here already).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.docs_site import DOCS

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the docs extra (mkdocs)")

YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")
TESTS = """
def test_one():
    assert sum(range(10)) == 45

def test_two():
    assert "gpu".upper() == "GPU"
"""


def blocks(md: str) -> list[Any]:
    return [yaml.safe_load(text) for text in YAML_BLOCK.findall((DOCS / md).read_text(encoding="utf-8"))]


def recipe(md: str, key: str) -> Any:
    """The YAML block of ``md`` that has ``key`` at its top (a workflow's ``jobs``, GitLab's job name)."""
    (found,) = [b for b in blocks(md) if isinstance(b, dict) and key in b]
    return found


def install_lines(block: Any) -> list[str]:
    found = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            found.extend(line for line in value.splitlines() if "pip install" in line)

    walk(block)
    return found


def test_every_yaml_block_parses_and_installs_the_plugin_as_a_package():
    parsed = blocks("ci.md") + blocks("contributing.md")
    assert len(parsed) >= 4
    for block in blocks("ci.md"):
        lines = install_lines(block)
        assert lines, block
        for line in lines:
            assert "pytest-gpuutil" in line, line  # not `pip install -e .` alone: that is the user's project


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_two.py").write_text(TESTS, encoding="utf-8")
    return root


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-ec", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def environment(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_", "CI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, "COLUMNS": "100", **more}


def github_value(expression: str, event: str) -> Any:
    """A GitHub Actions expression of the recipes, on ``main`` (push) or on a pull request."""
    expression = expression.strip()
    values = {"github.ref == 'refs/heads/main'": event == "push",
              "github.event_name == 'pull_request'": event == "pull_request", "always()": True,
              "matrix.shard": "1", "github.run_id": "1", "runner.name": "here"}
    if expression not in values:
        raise AssertionError(f"a recipe uses an expression this test does not know: {expression}")
    return values[expression]


def run_github_job(job: dict[str, Any], root: Path, event: str) -> list[str]:
    """The job's steps in order: ``run:`` commands run, installs checked, artifacts passed on by hand."""
    ran = []
    for step in job["steps"]:
        condition = step.get("if")
        if condition is not None and not github_value(condition, event):
            continue
        uses = step.get("uses", "")
        if uses.startswith("actions/download-artifact"):
            for shard in root.glob("shard*/gpu_util.json"):  # what the shard jobs uploaded
                target = root / step["with"]["path"] / f"gpu-util-{shard.parent.name}" / "gpu_util.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(shard, target)
        command = step.get("run")
        if command is None:
            continue
        command = EXPRESSION.sub(lambda m: str(github_value(m.group(1), event)), command)
        if "pip install" in command:
            continue  # checked by the test above; the plugin is installed here
        if "--splits" in command and shutil.which("pytest") and not _has("pytest_split"):
            command = re.sub(r"--splits \d+ --group \S+ ", "", command)  # pytest-split is not installed here
        command = command.replace("pytest -n 2 ", "pytest -n 0 ")  # one process: xdist is tested elsewhere
        proc = shell(command, root, environment())
        assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        ran.append(command)
    return ran


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_the_github_one_runner_recipe_runs_on_main_then_on_a_pull_request(tmp_path):
    workflow = [b for b in blocks("ci.md") if "jobs" in b and "gpu" in b["jobs"]][0]
    root = project(tmp_path)
    on_main = run_github_job(workflow["jobs"]["gpu"], root, "push")
    assert any("--gpu-util-save main" in c for c in on_main)
    assert (root / ".gpu_util" / "baselines").is_dir()
    on_pr = run_github_job(workflow["jobs"]["gpu"], root, "pull_request")
    assert any("--gpu-util-compare=main" in c for c in on_pr)


def test_the_gitlab_recipe_runs_on_the_default_branch_then_on_a_merge_request(tmp_path):
    job = recipe("ci.md", "gpu-tests")["gpu-tests"]
    root = project(tmp_path)
    script = "\n".join(line for line in job["script"] if "pip install" not in line)
    for branch in ("main", "feature"):
        proc = shell(script, root, environment(CI_COMMIT_BRANCH=branch, CI_DEFAULT_BRANCH="main"))
        assert proc.returncode == 0, f"{branch}: {proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    assert (root / ".gpu_util" / "gpu_util.json").is_file() and (root / "junit.xml").is_file()


def test_the_shards_recipe_merges_gates_and_keeps_a_history(tmp_path):
    workflow = [b for b in blocks("ci.md") if "jobs" in b and "shard" in b["jobs"]][0]
    root = project(tmp_path)
    for event in ("push", "pull_request"):
        run_github_job(workflow["jobs"]["shard"], root, event)
        ran = run_github_job(workflow["jobs"]["gate"], root, event)
        assert any(c.startswith("gpuutil merge") for c in ran), ran
    assert (root / ".gpu_util" / "history.sqlite").is_file()
    assert (root / "merged" / "report.html").is_file()
