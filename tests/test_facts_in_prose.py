"""The numbers that the prose of steps 57-73 states are numbers that the page's own code printed.

A page that says "870 of the 1,201 flushed entries" must show 870 and 1,201 in one of its outputs: otherwise
the number was copied in by hand, and the code may since compute another. The check reads the committed,
executed notebooks (nothing runs here): it collects every number in the markdown cells that could have come from
a computation, and fails on any that no code cell's output (a stream, or a result's text/plain) contains.

What counts as such a number in the prose:

- an integer of three digits or more (512, 3070), or one with thousands separators (1,201; 65,504);
- a decimal (0.10, 1.68), a percentage (27.6%, 6%), a ratio (4x, 2×; 1.8x is a decimal);

and what is left out: inline code (`Linear(64, 64)`), link targets, the exponents of powers written in maths
($10^{-12}$, $2^{-24}$: definitions), and the sides of a shape (256 × 256 is two numbers 256, not a ratio). A
number that is a definition, a size the code is given, or arithmetic done in the prose itself (65504 as float16's
largest number, 300 squared) goes in ALLOWED, per page, with its reason. The match is on the number as written,
thousands separators ignored on both sides, with no other digit around it ("512" is not found in "5120" nor in
"0.512"); a percentage must be printed with its %, a ratio with x, × or "times", and a decimal may be printed
with more zeros (6.5 as 6.50).
"""
import copy
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = range(57, 76)

# Per page: number as written in the prose -> why the page may state it without printing it.
ALLOWED = {
    57: {},
    58: {},
    59: {
        "256": "the layer output's shape, given to the code (256 rows of 512)",
        "512": "the layer output's shape, given to the code",
    },
    60: {},
    61: {
        "65504": "float16's largest number, a definition (step 60 prints it)",
    },
    62: {
        "0.5": "GradScaler's backoff factor, PyTorch's default setting",
        "65504": "float16's largest number, a definition (step 60 prints it)",
    },
    63: {
        "2.13": "the version of PyTorch the page is written against",
    },
    64: {},
    65: {
        "512": "n m = 512, the size of the Jacobians the code is given",
        "0.4": "the exercise's input t, given",
    },
    66: {
        "3.43": "the benchmark's budget, quoted from bench/results/capstone.md (bench/, not this page, measures it)",
        "128": "the benchmark's largest depth, quoted from bench/results/capstone.md",
        "6%": "the benchmark's smallest excess over PyTorch's peak, from bench/results/capstone.md",
        "18%": "the benchmark's largest excess over PyTorch's peak, from bench/results/capstone.md",
        "1024": "the exercise's loss scale, given to the code",
    },
    67: {
        "256": "the network's width, given to the code",
    },
    68: {},
    69: {},
    70: {},
    71: {},
    72: {},
    73: {
        "256": "the timed network's width, given to the code",
        "512": "the bucket cap in bytes, given to the code (bucket_cap_mb=512 / 2**20)",
    },
    74: {
        "2020": "the year of the ZeRO paper, cited",
        "256": "the traced network's width, given to the code",
        "1.5": "worked in the open: two all-gathers and a reduce-scatter move 3(N - 1)/N of the parameters' bytes a "
               "rank, an all-reduce 2(N - 1)/N",
    },
    75: {},
}


CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
POWER = re.compile(r"\^\{?-?[\d.]+\}?")  # 2^{-24}, 10^{-8}, 2^3: the exponent is no number of the prose
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
NUMBER = re.compile(
    r"(?<![\w.])"  # not inside a word or another number
    r"(?:(?P<percent>\d+(?:\.\d+)?)\s?%"  # 27.6%, 6 %
    r"|(?P<ratio>\d+)\s?(?:×|x\b)(?!\s?\d)"  # 4x, 2× (not a shape, 2 × 3; a decimal ratio, 1.8x, is a decimal)
    r"|(?P<plain>\d{1,3}(?:,\d{3})+|\d+\.\d+|\d{3,}))"  # 1,201; 0.10; 512
    r"(?!\d)"
)


def prose_numbers(markdown):
    """The numbers a markdown text states, as written ("27.6%", "4x", "1,201"), in order, each once."""
    text = LINK_TARGET.sub("]", CODE_SPAN.sub(" ", markdown))
    text = POWER.sub(" ", text)
    found = []
    for match in NUMBER.finditer(text):
        number = (match["percent"] + "%" if match["percent"] else match["ratio"] + "x" if match["ratio"]
                  else match["plain"])
        if number not in found:
            found.append(number)
    return found


def output_text(notebook):
    """Every code cell's printed text and text/plain result, thousands separators removed."""
    parts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        for output in cell.get("outputs", []):
            text = output.get("text") if output["output_type"] == "stream" else output.get("data", {}).get("text/plain")
            if text:
                parts.append("".join(text))
    return THOUSANDS.sub("", "\n".join(parts))


def printed(number, outputs):
    """Whether `number` (as prose_numbers gives it) appears in the outputs, with no digit on either side: a
    percentage followed by its %, a ratio by x, × or "times"; a decimal may be printed with more zeros (6.5 as
    6.50)."""
    if number.endswith("%"):
        pattern = re.escape(number[:-1]) + r"\s?%"
    elif number.endswith("x"):
        pattern = re.escape(number[:-1]) + r"\s?(?:×|x\b| times)"
    else:
        pattern = re.escape(THOUSANDS.sub("", number)) + ("0*" if "." in number else "") + r"(?!\d)"
    return re.search(r"(?<![\d.])" + pattern, outputs) is not None


def unprinted(notebook, allowed):
    """The prose's numbers that no output shows and that `allowed` does not excuse, with the cell they are in."""
    outputs = output_text(notebook)
    missing = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for number in prose_numbers("".join(cell["source"])):
            if number not in allowed and not printed(number, outputs):
                missing.append(f"cell {index}: {number}")
    return missing


def load(step):
    return json.loads((ROOT / "notebooks" / f"step{step:02d}.ipynb").read_text())


@pytest.mark.parametrize("step", [pytest.param(s, marks=getattr(pytest.mark, f"step{s:02d}")) for s in PAGES])
def test_every_number_in_the_prose_is_printed_by_the_page(step):
    missing = unprinted(load(step), ALLOWED[step])
    assert not missing, (
        f"step{step:02d}: numbers in the prose that no output of the page shows (print them, refer to the "
        f"output, or allow a definition in ALLOWED with its reason): {missing}"
    )


@pytest.mark.parametrize("step", [pytest.param(s, marks=getattr(pytest.mark, f"step{s:02d}")) for s in PAGES])
def test_every_allowed_number_is_still_in_the_prose(step):
    stated = {n for cell in load(step)["cells"] if cell["cell_type"] == "markdown"
              for n in prose_numbers("".join(cell["source"]))}
    assert set(ALLOWED[step]) <= stated, f"step{step:02d}: stale entries in ALLOWED: {set(ALLOWED[step]) - stated}"


def plant(notebook, old, new):
    """A copy of `notebook` whose markdown says `new` where it said `old` (once)."""
    planted = copy.deepcopy(notebook)
    cells = [cell for cell in planted["cells"] if cell["cell_type"] == "markdown" and old in "".join(cell["source"])]
    assert len(cells) == 1, f"{old!r} is in {len(cells)} markdown cells"
    cells[0]["source"] = "".join(cells[0]["source"]).replace(old, new)
    return planted


@pytest.mark.step62
def test_a_number_planted_in_the_prose_fails_the_check():
    notebook = load(62)
    assert not unprinted(notebook, ALLOWED[62])
    wrong = plant(notebook, "at chance, 0.10.", "at chance, 0.12.")
    missing = unprinted(wrong, ALLOWED[62])
    assert len(missing) == 1 and missing[0].endswith(": 0.12")


@pytest.mark.step60
def test_a_right_number_passes_and_a_wrong_one_fails():
    notebook = load(60)
    right = plant(notebook, "They are lost before the sum.", "They are lost before the sum: 870 of the 1,201.")
    wrong = plant(notebook, "They are lost before the sum.", "They are lost before the sum: 871 of the 1,201.")
    assert not unprinted(right, ALLOWED[60])
    assert [entry.split(": ")[1] for entry in unprinted(wrong, ALLOWED[60])] == ["871"]


def test_what_counts_as_a_number_of_the_prose():
    markdown = ("The 1,201 entries, 870 of them (72.4%), a 4x gap, 2.6 times as deep; "
                "`Linear(512, 64)`, $2^{-25}$, $10^{-12}$, a 256 × 256 weight, [step 60](step60.ipynb), 12 layers.")
    assert prose_numbers(markdown) == ["1,201", "870", "72.4%", "4x", "2.6", "256"]
    outputs = "flushed: 1201 entries | 72.4 % | 4.0 | 2.60 | shape (256, 256) | 8700"
    assert [n for n in prose_numbers(markdown) if not printed(n, outputs)] == ["870", "4x"]
