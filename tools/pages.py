"""Measure the steps' pages as a learner meets them, and take their screenshots.

    python tools/pages.py                       # every step: a table from notebooks/ and book/_build/html
    python tools/pages.py 35 36 --shots DIR     # some steps, with screenshots cut into 1280 x 1600 screens
    python tools/pages.py --notebooks N --html H  # another checkout's notebooks and built book
    python tools/pages.py --check                # fail if a page is taller than 12,000 px (make check-book)

For each step: the visible code lines (code cells not collapsed by a `hide-input`, `hide-cell`,
`remove-input` or `remove-cell` tag), the markdown lines, the figures (image outputs), whether it
ends with a recap and exercises, and the page's height in the built book, opened in headless
Chromium 1280 px wide with the network off (`make book` first). `make pages` runs it.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_book import OFFLINE, browser  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
WIDTH, SCREEN = 1280, 1600
MOST_PX = 12_000  # CONTRIBUTING.md: a page a learner reads in one sitting
# Written into a copy of the page: once it has laid out, the page's height replaces the body.
MEASURE = ("<script>window.addEventListener('load', () => setTimeout(() => {"
           "document.body.innerHTML = '<pre id=height>' + document.documentElement.scrollHeight + '</pre>';"
           "}, 500));</script></body>")


def cell_lines(cell):
    source = cell["source"]
    text = "".join(source) if isinstance(source, list) else source
    return len(text.strip("\n").splitlines()) if text.strip() else 0


def notebook_measures(path):
    """(visible code lines, markdown lines, figures, has a recap, has exercises) of one notebook."""
    cells = json.loads(path.read_text())["cells"]
    code = sum(cell_lines(c) for c in cells
               if c["cell_type"] == "code" and not HIDDEN & set(c.get("metadata", {}).get("tags", [])))
    markdown = sum(cell_lines(c) for c in cells if c["cell_type"] == "markdown")
    figures = sum(1 for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
                  if {"image/png", "image/svg+xml"} & set(o.get("data", {})))
    headings = [line for c in cells if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
    return code, markdown, figures, "## Recap" in headings, "## Exercises" in headings


def chromium(*arguments, timeout=180):
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               *OFFLINE, f"--window-size={WIDTH},{SCREEN}", "--virtual-time-budget=20000", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True).stdout


def page_height(page, profile):
    """The page's height in CSS pixels at 1280 px, measured by a script in a copy beside the page."""
    probe = page.with_name(f".measure-{page.name}")
    probe.write_text(page.read_text().replace("</body>", MEASURE, 1))
    try:
        for attempt in range(6):  # on a busy machine the page may not have loaded before the DOM was read: again
            time.sleep(2 * attempt)  # (and give the machine a moment more each time)
            match = re.search(r'<pre id="height">(\d+)</pre>',
                              chromium(f"--user-data-dir={profile}", "--dump-dom", probe.as_uri()))
            if match:
                return int(match.group(1))
    finally:
        probe.unlink()
    sys.exit(f"pages: could not measure {page}")


def screenshots(page, height, profile, folder):
    """The whole page as one screenshot, cut into screens of 1280 x 1600 (PNG files in `folder`)."""
    from PIL import Image

    whole = folder / f"{page.stem}-whole.png"
    chromium(f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", f"--screenshot={whole}",
             page.as_uri())
    image = Image.open(whole)
    for index, top in enumerate(range(0, image.height, SCREEN)):
        image.crop((0, top, WIDTH, min(top + SCREEN, image.height))).save(folder / f"{page.stem}-{index + 1:02d}.png")
    whole.unlink()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="*", type=int, help="step numbers (default: every step)")
    parser.add_argument("--notebooks", type=pathlib.Path, default=ROOT / "notebooks")
    parser.add_argument("--html", type=pathlib.Path, default=ROOT / "book" / "_build" / "html")
    parser.add_argument("--shots", type=pathlib.Path, help="write screenshots of each page into this folder")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a page is taller than {MOST_PX:,} px")
    args = parser.parse_args()
    numbers = args.steps or sorted(int(p.stem[4:]) for p in args.notebooks.glob("step[0-9][0-9].ipynb"))
    print("| step | visible code lines | markdown lines | figures | recap | exercises | height (px) |")
    print("|---|---|---|---|---|---|---|")
    too_tall = []
    with tempfile.TemporaryDirectory() as profile:
        for number in numbers:
            code, markdown, figures, recap, exercises = notebook_measures(args.notebooks / f"step{number:02d}.ipynb")
            page = (args.html / "notebooks" / f"step{number:02d}.html").resolve()
            height = page_height(page, profile) if page.exists() else None
            if args.shots and height:
                args.shots.mkdir(parents=True, exist_ok=True)
                screenshots(page, height, profile, args.shots)
            print(f"| {number} | {code} | {markdown} | {figures} | {'yes' if recap else 'no'} | "
                  f"{'yes' if exercises else 'no'} | {height if height else 'not built'} |", flush=True)
            if height is None or height > MOST_PX:
                too_tall.append(f"step {number}: {'not built' if height is None else f'{height:,} px'}")
    if args.check and too_tall:
        sys.exit(f"pages: taller than {MOST_PX:,} px at 1280 px, or missing: {'; '.join(too_tall)}")


if __name__ == "__main__":
    main()
