"""A PNG of one test's GPU timeline from an HTML report (headless Chromium, Debian's ``chromium``).

    python scripts/screenshot_timeline.py PAGE.html OUT.png [--test SUBSTRING] [--width 1400]

Opens the page, opens the detail view of the first test that has a timeline (or the first whose
id contains SUBSTRING), waits until the timeline is drawn, shows that detail view alone and
saves the screenshot. Exits 1 with one line when the page has no timeline or Chromium fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers.headless_chromium import FLAGS, find_chromium, inject  # noqa: E402

#: Opens the chosen row, waits for its timeline, then shows only its detail view.
SHOW = r"""
window.addEventListener("load", function () {
  var wanted = %s;
  window.guReport && window.guReport.showAll();
  var rows = Array.prototype.filter.call(document.querySelectorAll("#tests tbody tr.tl-has"), function (r) {
    return !wanted || r.cells[0].textContent.indexOf(wanted) >= 0; });
  if (!rows.length) { document.title = "gu-shot: no timeline"; return; }
  document.addEventListener("gu-timeline", function () {
    var dv = rows[0].nextSibling.querySelector(".dv");
    var main = document.querySelector("main");
    var holder = document.createElement("main");
    holder.appendChild(dv);
    document.body.insertBefore(holder, main);
    main.style.display = "none";
    var box = dv.querySelector(".tl");
    // the timeline first, then the rest of the detail view
    dv.insertBefore(box.previousSibling.previousSibling, dv.children[1]);
    dv.insertBefore(box.previousSibling, dv.children[2]);
    dv.insertBefore(box, dv.children[3]);
    box.guView.draw();
    document.title = "gu-shot: ok";
  });
  rows[0].click();
});
"""


def shoot(page: Path, out: Path, test: Optional[str] = None, width: int = 1400, height: int = 900) -> Path:
    """Write the screenshot of ``page``'s timeline to ``out``; RuntimeError with the reason if it cannot."""
    import subprocess

    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    text = page.read_text(encoding="utf-8")
    if 'id="gu-timelines"' not in text:
        raise RuntimeError(f"{page} has no timelines (run with --gpu-util-html; --gpu-util-timelines is not off)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shown = Path(tmp) / "shown.html"
        shown.write_text(inject(text, SHOW % json.dumps(test or "")), encoding="utf-8")
        cmd = [chromium, *FLAGS, f"--user-data-dir={tmp}/profile", "--virtual-time-budget=5000",
               f"--window-size={width},{height}", f"--screenshot={out.resolve()}", shown.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-500:]}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, metavar="PAGE.html")
    parser.add_argument("out", type=Path, metavar="OUT.png")
    parser.add_argument("--test", default=None, help="the first test whose id contains this (default: the first with a timeline)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    try:
        shoot(args.page, args.out, args.test, args.width, args.height)
    except (OSError, RuntimeError) as exc:
        print(f"screenshot_timeline: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
