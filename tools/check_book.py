"""Open the built book in headless Chromium with the network off and check that its maths is typeset.

    python tools/check_book.py [book/_build/html]

For every page that holds maths, Chromium loads the page from disk (every host name
resolves to nothing and every connection goes to a closed proxy, so nothing can come
from the web), runs its scripts, and prints the page as it then stands. The page
passes when MathJax replaced every formula by typeset output (an <mjx-container>), no
formula is left as raw TeX such as \\(x^2\\), and none failed to typeset (<mjx-merror>).
`make check-book` builds the book and runs this; it needs Chromium (apt install chromium).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
           "--disable-background-networking", "--disable-component-update", "--disable-sync")
# Sphinx writes each formula as <span class="math ..."> (inline) or <div class="math ..."> (display)
FORMULA = re.compile(r'<(span|div) class="math notranslate nohighlight">')
RAW_TEX = re.compile(r'<(?:span|div) class="math notranslate nohighlight">\s*(\\\(|\\\[|\$)')


def browser():
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        sys.exit("check_book: needs Chromium to open the pages (apt install chromium); none found on PATH")
    return found


def rendered(chromium, page, profile):
    """The page's DOM after its scripts ran, offline."""
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *OFFLINE,
               f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout


def problems(source, dom):
    """What is wrong with the typesetting of one page (an empty list when nothing is)."""
    formulas, typeset = len(FORMULA.findall(source)), dom.count("<mjx-container")
    found = []
    if typeset < formulas:
        found.append(f"{formulas} formulas, {typeset} typeset")
    if RAW_TEX.search(dom):
        found.append("raw TeX left on the page: " + RAW_TEX.search(dom).group(0))
    if "<mjx-merror" in dom:
        found.append(f"{dom.count('<mjx-merror')} formulas failed to typeset (mjx-merror)")
    return found


def main():
    html = (pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "book" / "_build" / "html").resolve()
    pages = sorted(p for p in html.rglob("*.html") if "_static" not in p.parts and FORMULA.search(p.read_text()))
    if not pages:
        sys.exit(f"check_book: no page with maths under {html}; build the book first (make book)")
    chromium, failures, formulas = browser(), 0, 0
    with tempfile.TemporaryDirectory() as profile:
        for page in pages:
            source = page.read_text()
            found = problems(source, rendered(chromium, page, profile))
            formulas += len(FORMULA.findall(source))
            failures += bool(found)
            print(f"{'FAIL' if found else 'ok  '}  {page.relative_to(html)}  {'; '.join(found)}", flush=True)
    print(f"\n{len(pages) - failures} of {len(pages)} pages with maths typeset offline ({formulas} formulas)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
