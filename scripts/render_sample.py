"""The README's sample and docs/img/report.png, from one GPU run of the main job (CPU machine, Chromium).

    python scripts/render_sample.py [LOG]            (default: the newest committed examples_80.log)
    python scripts/render_sample.py LOG --check      (exit 1 when README.md's sample differs from LOG's)

LOG is the 80-column log of ``pytest --gpu-util --gpu-util-html examples/`` that ``scripts/device.sh``'s
``sample`` step writes (``sample/examples_80.log``): copy the step's ``work/`` folder to
``benchmarks/results/DATE_GPU/`` first and render from there, so that the README names the committed
file that tests/docs/test_figures.py compares it with.
README.md's block between ``<!-- sample:start -->`` and ``<!-- sample:end -->`` is rendered from it by
the docs hook's own function (docs/hooks.py ``sample_block``: the same text as Getting started's, and
what tests/docs/test_figures.py compares), and ``docs/img/report.png`` is taken with
scripts/screenshot.py from the HTML page of the same run (``gpu_util/report.html`` beside the log),
so the two cannot tell different figures. About 20 s (Chromium).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import hooks  # noqa: E402  (docs/hooks.py: the docs' own renderer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render README.md's sample and docs/img/report.png from one run.")
    parser.add_argument("log", type=Path, nargs="?", help="the run's examples_80.log (default: the newest committed)")
    parser.add_argument("--check", action="store_true", help="only compare README.md's sample with the log's")
    parser.add_argument("--no-picture", action="store_true", help="leave docs/img/report.png as it is")
    args = parser.parse_args(argv)
    log = (args.log or hooks.newest_sample()).resolve()
    if not log.is_file():
        parser.error(f"{log}: no such log")
    if not log.is_relative_to(hooks.RESULTS):
        print(f"note: {log} is not under benchmarks/results/: copy the run there first (e.g. "
              "benchmarks/results/DATE_GPU/sample/), then render from it, or the docs' test will not match",
              file=sys.stderr)
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    rendered = hooks.sample_block(text, log)
    if args.check:
        if rendered != text:
            print(f"README.md's sample differs from {log}: run python scripts/render_sample.py {log}", file=sys.stderr)
            return 1
        return 0
    readme.write_text(rendered, encoding="utf-8")
    print(f"README.md: sample from {log}")
    if args.no_picture:
        return 0
    page = log.parent / "gpu_util" / "report.html"
    if not page.is_file():
        print(f"no {page}: docs/img/report.png left as it is (the sample step writes it)", file=sys.stderr)
        return 1
    subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshot.py"), str(page), str(ROOT / "docs" / "img" / "report.png")],
                   check=True)
    print(f"docs/img/report.png: from {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
