"""Open a page in headless Chromium (Debian's ``chromium``) and read back what a script found.

No DevTools-protocol client: the page under test gets a small script injected at the top of its
``<head>`` (``PRELUDE``, then the caller's own), which records script errors and, once the page
has loaded, writes a JSON result into ``<pre id="gu-harness">``; ``chromium --dump-dom`` prints
the DOM after the load event and :func:`run_page` reads the result from it. Used by
``tests/report/test_html_browser.py`` and ``benchmarks/bench_html.py``.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

#: Flags for a quiet, offline-friendly headless run (no sandbox: CI containers run as root).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",  # Debian's launcher adds it only where its /dev/shm check parses
    "--hide-scrollbars",
)

#: Runs before anything else on the page: collects errors and gives ``window.guHarness.done(result)``.
PRELUDE = r"""
window.guHarness = { errors: [] };
window.addEventListener("error", function (e) {
  guHarness.errors.push(String(e.message) + " (" + (e.filename || "") + ":" + (e.lineno || 0) + ")");
});
window.addEventListener("unhandledrejection", function (e) { guHarness.errors.push("unhandled rejection: " + e.reason); });
(function () {
  var original = console.error;
  console.error = function () {
    guHarness.errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
guHarness.done = function (result) {
  result = result || {};
  result.errors = guHarness.errors.slice();
  var pre = document.createElement("pre");
  pre.id = "gu-harness";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
};
"""

_RESULT = re.compile(r'<pre id="gu-harness">(.*?)</pre>', re.S)


class BrowserError(Exception):
    """Chromium did not run, or the page wrote no result (``dom``: what Chromium printed, if anything)."""

    def __init__(self, message: str, dom: str = "") -> None:
        super().__init__(message)
        self.dom = dom


def find_chromium() -> Optional[str]:
    """The Chromium executable (``$CHROMIUM``, then ``chromium`` / ``chromium-browser`` on PATH), or None."""
    for candidate in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if candidate:
            found = shutil.which(candidate)
            if found:
                return found
    return None


def inject(page: str, script: str) -> str:
    """``page`` with ``PRELUDE`` and ``script`` as the first elements of its ``<head>``."""
    tag = f"<script>{PRELUDE}\n{script}</script>"
    head = page.find("<head>")
    if head < 0:
        raise ValueError("the page has no <head>")
    at = head + len("<head>")
    return page[:at] + tag + page[at:]


def _run(chromium: str, args: list[str], workdir: Path, timeout: float) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=workdir)
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BrowserError(f"chromium took more than {timeout:.0f} s: {' '.join(cmd)}") from None
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def run_page(chromium: str, page: str, script: str, workdir: Path, timeout: float = 60.0,
             name: str = "page.html", virtual_time: bool = True, base_url: Optional[str] = None) -> dict[str, Any]:
    """Load ``page`` (HTML text) with ``script`` injected; return what it passed to ``guHarness.done``.

    With ``virtual_time`` Chromium runs the page's timers before it prints the DOM (for scripts
    that wait); timings should be taken without it, synchronously in the load event.
    Adds ``wall_s`` (the whole Chromium run, start-up included). A run that prints no DOM at all
    (Chromium did not start properly) is tried once more; one that prints the page without the
    result is not, since the page itself is then what failed. With ``base_url`` (a server whose
    root is ``workdir``) the page is opened from it rather than as a file.
    """
    path = Path(workdir) / name
    path.write_text(inject(page, script), encoding="utf-8")
    began = time.perf_counter()
    budget = ["--virtual-time-budget=10000"] if virtual_time else []
    address = f"{base_url.rstrip('/')}/{name}" if base_url else path.resolve().as_uri()
    args = [*budget, "--dump-dom", address]
    proc = _run(chromium, args, Path(workdir), timeout)
    if not proc.stdout.strip():  # printed nothing at all: a failed start, tried once more
        began = time.perf_counter()
        proc = _run(chromium, args, Path(workdir), timeout)
    wall = time.perf_counter() - began
    match = _RESULT.search(proc.stdout)
    if match is None:
        tail = "\n".join(line for line in proc.stderr.splitlines() if "dbus" not in line)[-1500:]
        printed = f"a DOM of {len(proc.stdout)} characters" if proc.stdout.strip() else "no DOM"
        raise BrowserError(f"no harness result: chromium printed {printed} (rc={proc.returncode}): {tail}",
                           dom=proc.stdout)
    result = json.loads(html.unescape(match.group(1)))
    result["wall_s"] = wall
    return result


def screenshot(chromium: str, page_path: Path, png_path: Path, width: int = 1400, height: int = 1800,
               timeout: float = 60.0, script: str = "") -> Path:
    """A PNG of the page's first ``width`` x ``height`` pixels (after ``script``, injected, has run)."""
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    if script:
        shown = png_path.with_suffix(".shown.html")
        shown.write_text(inject(Path(page_path).read_text(encoding="utf-8"), script), encoding="utf-8")
        page_path = shown
    try:
        proc = _run(chromium, [f"--window-size={width},{height}", f"--screenshot={png_path.resolve()}",
                               Path(page_path).resolve().as_uri()], png_path.parent, timeout)
    finally:
        if script:
            Path(page_path).unlink()
    if not png_path.is_file() or png_path.stat().st_size == 0:
        raise BrowserError(f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-1000:]}")
    return png_path
