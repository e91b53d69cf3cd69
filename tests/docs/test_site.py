"""The documentation site against the code: the generated reference pages, the README, the nav.

The site is built once per session (``site`` in conftest.py); the reference pages are generated
from the code by docs/hooks.py, and these tests compare the built pages with the code both ways,
so that neither can drift from the other.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pytest_gpuutil import cli
from pytest_gpuutil.analysis.rules import RULES
from pytest_gpuutil.options import INI_ONLY, OPTIONS
from tests.helpers.docs_site import (
    DOCS,
    ROOT,
    article_text,
    ids_of,
    nav_pages,
    page_path,
    section_text,
)

FLAGS = {spec.flag for spec in OPTIONS}
INI_KEYS = {spec.dest for spec in OPTIONS} | {name for name, _, _ in INI_ONLY}
#: an option or an ini key, as written anywhere in a page
FLAG_WORD = re.compile(r"--gpu-util(?:-[a-z]+)*")
INI_WORD = re.compile(r"(?<![\w.])gpu_util(?:_[a-z]+)*(?![\w])")
README_MAX_LINES = 200
#: a link from the README into the site: docs/PAGE.md or docs/PAGE.md#anchor
README_LINK = re.compile(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)")


def cli_commands() -> list[str]:
    """The commands of ``gpuutil --help`` (the CLI's usage text), in order."""
    usage = cli.USAGE.split("commands:", 1)[1]
    return list(dict.fromkeys(line.split()[0] for line in usage.splitlines() if line.strip()))


# -- options ------------------------------------------------------------------------------------

def test_the_options_page_lists_every_option_and_ini_key(site):
    page = page_path(site, "options.md")
    text, ids = article_text(page), ids_of(page)
    for spec in OPTIONS:
        assert spec.flag in text and spec.dest in text, spec.flag
        section = " ".join(section_text(page, spec.flag.lstrip("-")).split())
        assert spec.dest in section and " ".join(spec.help.split())[1:] in section, spec.flag
    for name, _, help_text in INI_ONLY:
        section = " ".join(section_text(page, name.replace("_", "-")).split())
        assert name.replace("_", "-") in ids and " ".join(help_text.split())[1:] in section, name


def test_every_option_named_on_the_options_page_exists(site):
    text = article_text(page_path(site, "options.md"))
    named_flags, named_keys = set(FLAG_WORD.findall(text)), set(INI_WORD.findall(text))
    assert named_flags >= FLAGS  # the check below reads what the page names
    assert named_flags - FLAGS == set()
    assert named_keys - INI_KEYS == set()


def test_every_option_named_anywhere_in_the_site_or_the_readme_exists(site):
    unknown = {}
    for md in nav_pages():
        found = set(FLAG_WORD.findall(article_text(page_path(site, md)))) - FLAGS
        if found:
            unknown[md] = sorted(found)
    readme = set(FLAG_WORD.findall((ROOT / "README.md").read_text(encoding="utf-8"))) - FLAGS
    if readme:
        unknown["README.md"] = sorted(readme)
    assert unknown == {}


# -- findings and the CLI -----------------------------------------------------------------------

def test_the_findings_page_has_a_section_per_rule_with_its_limits_and_an_example(site):
    page = page_path(site, "findings.md")
    for rule in RULES:
        section = " ".join(section_text(page, rule.id).split())
        assert rule.title[1:] in section and rule.fix[1:] in section, rule.id  # capitalised on the page
        for name, limit in rule.limits.items():
            assert f"{name} {limit.text} {' '.join(limit.reason.split())}" in section, (rule.id, name)
        assert "Before" in section and "After" in section, rule.id
    headings = re.findall(r'<h2 id="([^"]+)"', page.read_text(encoding="utf-8"))
    assert [h for h in headings if h in {r.id for r in RULES}] == [r.id for r in RULES]


def test_the_cli_page_has_each_commands_help(site):
    page = page_path(site, "cli.md")
    assert cli_commands() == ["analyze", "compare", "report", "merge", "history", "trace"]
    for command in cli_commands():
        helped = subprocess.run([sys.executable, "-m", "pytest_gpuutil", command, "--help"], capture_output=True,
                                text=True, check=True, env={"COLUMNS": "100", "PATH": ""}).stdout
        section = section_text(page, command)
        assert f"gpuutil {command} --help" in section, command
        assert helped.splitlines()[0] in section, command


# -- the README ---------------------------------------------------------------------------------

def test_the_readme_is_one_screen_and_its_docs_links_resolve(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    links = README_LINK.findall(readme)
    assert len(links) >= 10  # the feature list links into the site
    for target, anchor in links:
        relative = target[len("docs/"):]
        if relative.endswith(".md"):
            built = page_path(site, relative)
            assert built.is_file(), target
            if anchor:
                assert anchor in ids_of(built), f"{target}#{anchor}"
        else:  # a picture: copied into the site as it is
            assert (site / relative).is_file() and (DOCS / relative).is_file(), target


def test_the_readme_runs_the_main_job_with_the_html_page_and_holds_one_sample():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pytest --gpu-util --gpu-util-html examples/" in readme
    assert readme.count("<!-- sample:start -->") == readme.count("<!-- sample:end -->") == 1
    sample = readme.split("<!-- sample:start -->")[1].split("<!-- sample:end -->")[0]
    assert "GPU utilization (pytest-gpuutil)" in sample


# -- the pages and the nav (no mkdocs needed) --------------------------------------------------

def test_every_page_in_docs_is_in_the_nav_and_every_nav_page_exists():
    pages = nav_pages()
    assert pages[0] == "index.md" and len(pages) == len(set(pages)) >= 19
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk


def test_docs_holds_only_pages_pictures_and_the_hook():
    """docs/ is held to the nav instead of the 12-file rule of tests/test_repo_layout.py."""
    others = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*")
                    if p.is_file() and p.suffix != ".md" and "__pycache__" not in p.parts)
    assert [o for o in others if not (o == "hooks.py" or re.fullmatch(r"img/[\w.-]+\.png", o))] == []
    assert "img/report.png" in others


@pytest.mark.parametrize("md", ["options.md", "findings.md", "cli.md"])
def test_the_generated_pages_keep_their_markers(md):
    text = (DOCS / md).read_text(encoding="utf-8")
    assert f"<!-- gpuutil:{md[:-3]} -->" in text
