"""Make room for a new step: steps K and later move up by one, everywhere the repository names them.

    python tools/renumber.py 57        # steps 57.. become 58..; then write steps/step57.py

Step numbers live in file names (steps/, notebooks/, tests/), pytest markers, the package's step tags
(`# step 58: why`), prose ("step 58", "steps 58 and 59", "steps 49-64"), the book's links
(`{doc}`58 <notebooks/step58>``) and the tests' `load_step(58)`. Each is rewritten; the files move with
`git mv`, the highest first, so no name is taken twice. The committed notebooks keep their old outputs
until `make notebooks` runs again: renumbering changes no result, only names.
"""
import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXT = (".py", ".md", ".toml", ".txt", ".cfg", ".ipynb", "Makefile")

# "step 58", "Steps 58 and 59", "steps 49-64", "steps 41, 45": the word, then a list of numbers
PROSE = re.compile(r"\b([Ss]teps?) (\d+)((?:(?:, | and | or | to |[–-])\d+\b)*)")
LIST_ITEM = re.compile(r"(, | and | or | to |[–-])(\d+)")
ATTACHED = re.compile(r"\b(step|test_step)(\d\d)(?!\d)")  # step58.py, notebooks/step58, pytest.mark.step58
CALLS = re.compile(r"\b(load_step\(|step=)(\d+)\b")  # load_step(58), show_code(x, step=58)
DOC_LINK = re.compile(r"`(\d\d) (<notebooks/step)")  # the book's {doc}`58 <notebooks/step58>` (the path: ATTACHED)
STAGE_ROW = re.compile(r"^(\| 5 \| \d\d–)(\d\d)( \|)", re.MULTILINE)  # README's stage table


def shift(number, first):
    n = int(number)
    return f"{n + 1:0{len(number)}d}" if n >= first else number


def rewrite(text, first):
    def prose(match):
        items = LIST_ITEM.sub(lambda m: m.group(1) + shift(m.group(2), first), match.group(3))
        return f"{match.group(1)} {shift(match.group(2), first)}{items}"

    text = PROSE.sub(prose, text)
    text = ATTACHED.sub(lambda m: m.group(1) + shift(m.group(2), first), text)
    text = CALLS.sub(lambda m: m.group(1) + shift(m.group(2), first), text)
    text = DOC_LINK.sub(lambda m: f"`{shift(m.group(1), first)} {m.group(2)}", text)
    return STAGE_ROW.sub(lambda m: m.group(1) + shift(m.group(2), first) + m.group(3), text)


def tracked():
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    here = pathlib.Path(__file__).resolve()  # not this file: its examples are not steps
    return [ROOT / n for n in names if n.endswith(TEXT) and (ROOT / n).resolve() != here]


def moves(first):
    """(old, new) paths of every file named after a step >= first, the highest step first."""
    pairs = []
    for folder, pattern in (("steps", "step{}.py"), ("notebooks", "step{}.ipynb"), ("tests", "test_step{}.py"),
                            ("tests", "test_step{}_lesson.py")):
        for path in (ROOT / folder).glob(pattern.format("[0-9][0-9]")):
            number = int(re.search(r"\d\d", path.name).group())
            if number >= first:
                pairs.append((number, path, path.with_name(path.name.replace(f"{number:02d}", f"{number + 1:02d}"))))
    return [(old, new) for _, old, new in sorted(pairs, key=lambda p: -p[0])]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=int, help="the step number the new step takes")
    first = parser.parse_args().first
    for path in tracked():
        text = path.read_text()
        new = rewrite(text, first)
        if new != text:
            path.write_text(new)
    for old, new in moves(first):
        subprocess.run(["git", "mv", str(old), str(new)], cwd=ROOT, check=True)
    pyproject = ROOT / "pyproject.toml"
    marker = f'    "step{first:02d}: tests of step {first:02d}",\n'
    text = pyproject.read_text()
    following = f'    "step{first + 1:02d}: tests of step {first + 1:02d}",\n'
    pyproject.write_text(text.replace(following, marker + following, 1))
    print(f"steps {first} and later moved up by one; write steps/step{first:02d}.py", file=sys.stderr)


if __name__ == "__main__":
    main()
