"""Reading the documentation site: its nav (from mkdocs.yml, without PyYAML) and its built pages."""
from __future__ import annotations

import html
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: a page of the nav: ``- Title: page.md`` or ``- page.md``
_NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?([A-Za-z0-9_./-]+\.md)\s*$")


def nav_pages(config: Path = ROOT / "mkdocs.yml") -> list[str]:
    """The pages of mkdocs.yml's ``nav:``, in order (paths relative to docs/)."""
    lines = config.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip() == "nav:")
    pages = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith((" ", "-")):
            break  # the next top-level key
        match = _NAV_PAGE.match(line)
        if match:
            pages.append(match.group(1))
    return pages


def page_path(site: Path, md: str) -> Path:
    """The built HTML file of a page of docs/ (``index.md`` -> index.html, ``x.md`` -> x/index.html)."""
    stem = md[:-3] if md.endswith(".md") else md
    return site / "index.html" if stem == "index" else site / stem / "index.html"


def article_text(page: Path) -> str:
    """The visible text of a built page's main content (Material's ``<article>``), tags removed."""
    text = page.read_text(encoding="utf-8")
    start, end = text.find("<article"), text.find("</article>")
    body = text[start:end] if start >= 0 and end > start else text
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    body = re.sub(r"<[^>]+>", " ", body)
    return html.unescape(body)


def ids_of(page: Path) -> set[str]:
    """Every ``id`` attribute of a built page (the anchors a link may name)."""
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def section_text(page: Path, anchor: str) -> str:
    """The text of a built page from the heading with id ``anchor`` to the next heading of its level."""
    text = page.read_text(encoding="utf-8")
    match = re.search(rf'<h([1-6])[^>]*\bid="{re.escape(anchor)}"', text)
    if match is None:
        raise KeyError(f"{page}: no heading with id {anchor!r}")
    level = int(match.group(1))
    following = re.compile(rf"<h[1-{level}][\s>]").search(text, match.end())
    end = text.find("</article>", match.end())
    part = text[match.start():following.start() if following else end]
    return html.unescape(re.sub(r"<[^>]+>", " ", part))
