"""The built site in a real browser: headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it).

The built site is served over HTTP from 127.0.0.1 (as ``mkdocs serve`` or any static host would;
from file:// every file is its own origin and the theme's search worker cannot start). A copy of
its front page, beside it, gets the harness of tests/helpers/headless_chromium.py: after the page
has loaded it reports the title, whether the theme's stylesheet applied, the picture and every
link of the navigation; ``chromium --dump-dom`` prints it. The search index is read from the
built files.
"""
from __future__ import annotations

import functools
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import pytest

from pytest_gpuutil.options import INI_ONLY, OPTIONS
from tests.helpers.docs_site import nav_pages, page_path
from tests.helpers.headless_chromium import find_chromium, run_page, screenshot

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it with apt-get)")

class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture()
def served(site: Path) -> Iterator[str]:
    """The built site served from 127.0.0.1 on a free port, for the test's duration."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


HARNESS = r"""
window.addEventListener("load", function () {
  var out = {};
  try {
    out.title = document.title;
    out.h1 = (document.querySelector("article h1") || {}).textContent || "";
    var header = document.querySelector(".md-header");
    out.header_position = header ? getComputedStyle(header).position : "";
    out.nav = Array.prototype.slice.call(document.querySelectorAll("nav.md-nav--primary a.md-nav__link[href]"))
      .map(function (a) { return {href: a.href, text: a.textContent.trim()}; });
    out.search_box = !!document.querySelector("input.md-search__input");
    out.image = (function () {
      var img = document.querySelector("article img");
      return img ? {src: img.getAttribute("src"), complete: img.complete, width: img.naturalWidth} : null;
    })();
  } catch (e) {
    guHarness.errors.push("harness: " + e);
  }
  guHarness.done(out);
});
"""


def test_the_front_page_renders_with_every_page_in_its_nav(site: Path, served: str, tmp_path: Path):
    result = run_page(CHROMIUM, (site / "index.html").read_text(encoding="utf-8"), HARNESS, site,
                      name="harness_index.html", base_url=served)
    assert result["errors"] == []
    assert result["h1"].strip().rstrip("¶") == "pytest-gpuutil" and result["title"].startswith("pytest-gpuutil")
    assert result["header_position"] in ("sticky", "fixed")  # Material's stylesheet applied
    assert result["search_box"]
    assert result["image"] and result["image"]["complete"] and result["image"]["width"] > 500
    # Material links a page's folder ("getting-started/"); the front page links itself as "."
    linked = set()
    for item in result["nav"]:
        path = urlparse(item["href"]).path.lstrip("/")
        linked.add(site / path / "index.html" if not path.endswith(".html") else site / path)
    wanted = {page_path(site, md) for md in nav_pages()}
    assert wanted - linked == set()
    assert len(result["nav"]) >= len(wanted)
    screenshot(CHROMIUM, site / "index.html", tmp_path / "index.png", width=1280, height=900)


def test_the_search_index_has_every_option(site: Path):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    entries = [doc for doc in index["docs"] if doc["location"].startswith("options/")]
    assert entries
    for spec in OPTIONS:
        hits = [doc for doc in entries if spec.flag in doc["title"] or spec.flag in doc["text"]]
        assert any(doc["location"].endswith("#" + spec.flag.lstrip("-")) for doc in hits), spec.flag
    for name, _, _ in INI_ONLY:
        assert any(name in doc["title"] or name in doc["text"] for doc in entries), name
