"""A PNG of an HTML report as headless Chromium (Debian's ``chromium``) draws it.

    python scripts/screenshot.py PAGE.html OUT.png [--width 1400] [--height 1700] [--no-detail]

Takes the picture the docs show (``docs/img/report.png``, in the README and on the getting-started
page) from a real run's page, e.g. the main job's ``.gpu_util/report.html`` or
``benchmarks/results/<date>_<gpu>/.../examples_report.html``. By default the first test's detail
view is opened first (a click on its row), so the picture shows a test's categories and top kernels
too. Runs on any machine with Chromium (no GPU); exits 2 with one line when Chromium or the page is
missing.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers.headless_chromium import BrowserError, find_chromium, screenshot  # noqa: E402

#: Opens the first test's detail view once the page has loaded.
SHOW_DETAIL = 'window.addEventListener("load", function () { var r = document.querySelector("#tests tbody tr"); if (r) r.click(); });'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshot an HTML report in headless Chromium.")
    parser.add_argument("page", type=Path, help="the HTML page (a pytest-gpuutil report)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1400, help="window width in pixels (default 1400)")
    parser.add_argument("--height", type=int, default=1700, help="window height in pixels (default 1700)")
    parser.add_argument("--no-detail", action="store_true", help="leave the first test's detail view closed")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("error: chromium is not installed (apt-get install chromium, or set CHROMIUM)", file=sys.stderr)
        return 2
    if not args.page.is_file():
        print(f"error: {args.page}: no such file", file=sys.stderr)
        return 2
    try:
        screenshot(chromium, args.page, args.out, width=args.width, height=args.height,
                   script="" if args.no_detail else SHOW_DETAIL)
    except BrowserError as exc:
        print(f"error: {args.page}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({args.width}x{args.height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
