"""The learner's workbook: the steps and the package with the code each step introduces taken out, and
grading by each step's own tests.

    python tools/workbook.py build [--into workbook]   # `make workbook`: write the workbook (never over one)
    python tools/workbook.py grade NN [--workbook DIR] # `make grade STEP=NN`: the step's tests on the workbook
    python tools/workbook.py run NN [--workbook DIR]   # run the workbook's steps/stepNN.py on its package
    python tools/workbook.py list [NN]                 # the stubs of each step, and what was left written

The workbook holds `steps/` and `tinypytorch/` as in the repository, with stubs: a definition whose
body (after its signature and docstring) is `raise NotImplementedError("step NN: what to write")`. Which
definitions, for the steps 01-LAST:

- steps 01-22 (self-contained snapshots): every function and method that `steps/stepNN.py` adds or changes
  relative to `steps/step{NN-1}.py`, compared as code (comments and layout aside), its exercises' solutions
  included;
- steps 23-LAST: in the package, every function and method tagged with the step (`class Sin(Function):  #
  step 26` tags its methods too) and, untagged, what the step's page shows with `show_code` (first page
  only); in `steps/stepNN.py`, the definitions of its visible cells and of its exercises' solutions.

Never stubbed: PyTorch twins and pictures (definitions that use torch or matplotlib: the learner writes the
framework, not its check), module-level statements (imports, data, wiring), class attributes, and the
definitions in `LEFT_WRITTEN` or that the package calls while it is imported (found by importing the stubbed
package: `import tinypytorch` must work). Steps after LAST are copied as they are.

Grading (`grade`) runs tests/test_stepNN.py and tests/test_stepNN_lesson.py in a pytest process whose
environment names the workbook and the step; tests/workbook_grading.py then imports the workbook's package
and scripts in place of the repository's, and runs the repository's definition for a stub of a later step the
learner has not touched yet.
"""
import argparse
import ast
import dataclasses
import inspect
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import xml.etree.ElementTree as ElementTree

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))
import workbook_grading as grading  # noqa: E402  (tests/: the grading side reads stubs as this side writes them)

LAST = 34  # the last step with stubs: every step 01-LAST is gradeable
SNAPSHOTS = 22  # steps 01-22 hold the whole framework in their script
TITLE = re.compile(r"^# # Step \d+: (.+)$", re.MULTILINE)
HELPER_NAMES = {"torch", "plt", "matplotlib", "mpatches", "patches", "graphviz"}  # a twin or a picture
HELPER_ARGS = {"ax", "axes", "fig"}
# Definitions that a step's page shows but that are no exercise for that step.
LEFT_WRITTEN = {
    ("tinypytorch/core.py", "Function.run_plain"):
        "the hub every later step adds to (modes, views, saved tensors, type promotion): step 23 only moves it",
}


@dataclasses.dataclass(frozen=True)
class Stub:
    path: str  # relative to the repository (and to the workbook)
    key: tuple  # (qualified name, n): the n-th definition of that name (workbook_grading.definitions)
    step: int
    message: str  # what NotImplementedError says: "step NN: ..."
    later: tuple = ()  # the body's lines tagged with later steps, which the package needs already

    @property
    def name(self):
        return self.key[0] if self.key[1] == 1 else f"{self.key[0]} (definition {self.key[1]})"


# ----- which definitions are stubs ----------------------------------------------------------------------------

def plan(last=LAST):
    """The stubs of steps 01-`last`, in file order, and what was left written: [(path, name, step, why)]."""
    stubs, left = [], []
    for number in range(1, last + 1):
        found, skipped = script_stubs(number)
        stubs += found
        left += skipped
    found, skipped = package_stubs(last)
    return stubs + found, left + skipped


def script_stubs(number):
    path = ROOT / "steps" / f"step{number:02d}.py"
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    title = TITLE.search(source).group(1)
    relative = str(path.relative_to(ROOT))
    tops = {node.lineno: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    stubs, left = [], []
    hidden, exercises = _cells(source)
    if number <= SNAPSHOTS:
        before = {}
        if number > 1:
            previous = ast.parse((ROOT / "steps" / f"step{number - 1:02d}.py").read_text(encoding="utf-8"))
            before = {key: ast.dump(node) for key, _, _, node in grading.definitions(previous)}
        chosen = lambda key, node: before.get(key) != ast.dump(node)  # noqa: E731
    else:
        chosen = lambda key, node: node.lineno >= exercises or not hidden(node.lineno)  # noqa: E731
    for key, _, _, node in grading.definitions(tree):
        if not chosen(key, node):
            continue
        top = max(line for line in tops if line <= node.lineno)
        if _is_helper(tops[top]):
            left.append((relative, key[0], number, "a PyTorch twin or a picture"))
            continue
        if number <= SNAPSHOTS and key in before:
            what = f"change {_signature(key[0], node)} from step {number - 1:02d}'s"
            hint = _docstring(node) or title
        else:
            what = f"write {_signature(key[0], node)}"
            hint = _docstring(node) or _role(key[0]) or _class_docstring(tree, key[0]) \
                or ("the solution of an exercise of the page" if node.lineno >= exercises else title)
        stubs.append(Stub(relative, key, number, f"step {number:02d}: {what}: {hint}"))
    return stubs, left


def _cells(source):
    """(hidden(line), first line of the exercises) for a jupytext script: hidden cells are tagged hide-* or
    remove-*; the exercises start at the heading `## Exercises`."""
    headers, exercises = [], math.inf
    for number, line in enumerate(source.splitlines(), 1):
        if line.startswith("# %%"):
            headers.append((number, "hide-" in line or "remove-" in line))
        if line.strip() == "# ## Exercises":
            exercises = number

    def hidden(line):
        return next((h for start, h in reversed(headers) if start <= line), False)

    return hidden, exercises


def _is_helper(node):
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    args = {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
    return bool(names & HELPER_NAMES or args & HELPER_ARGS)


def package_stubs(last):
    """The package's stubs of steps 23-`last`: tagged definitions, then what the pages show (`show_code`)."""
    listing = _reference_listing()
    tagged, untagged = {}, {}  # (path, key) -> (step, node, tree, reason) / (node, tree)
    for file in sorted((ROOT / "tinypytorch").rglob("*.py")):
        relative = str(file.relative_to(ROOT))
        source = file.read_text(encoding="utf-8")
        tree = ast.parse(source)
        tags, full_line = listing._step_tags(source, source.splitlines())
        reasons = _tag_reasons(source)
        classes = _class_tags(tree, tags, full_line, reasons)
        for key, _, _, node in grading.definitions(tree):
            tag, line = _tag(node, tags, full_line)
            reason = reasons.get(line)
            owner = key[0].rpartition(".")[0]
            if tag is None and owner in classes:
                tag, reason = classes[owner]
                # an untagged method whose docstring names a later step came with that step
                later = [int(n) for n in re.findall(r"\bstep (\d+)", ast.get_docstring(node) or "")]
                tag = max([tag, *later])
            if tag is None:
                untagged[(relative, key)] = (node, tree)
            else:
                tagged[(relative, key)] = (tag, node, tree, reason)
    chosen = {(path, key): (tag, node, tree, reason) for (path, key), (tag, node, tree, reason) in tagged.items()
              if SNAPSHOTS < tag <= last}
    for number in range(SNAPSHOTS + 1, last + 1):
        for path, qualname in _shown(number):
            for (p, key), (node, tree) in list(untagged.items()):
                if p == path and (key[0] == qualname or key[0].startswith(qualname + ".")) \
                        and (p, key) not in chosen:
                    chosen[(p, key)] = (number, node, tree, None)
                    del untagged[(p, key)]
    stubs, left = [], []
    titles = {n: TITLE.search((ROOT / "steps" / f"step{n:02d}.py").read_text(encoding="utf-8")).group(1)
              for n in range(SNAPSHOTS + 1, last + 1)}
    for (path, key), (step, node, tree, reason) in chosen.items():
        why = LEFT_WRITTEN.get((path, key[0]))
        if why:
            left.append((path, key[0], step, why))
            continue
        hint = _docstring(node) or reason or _role(key[0]) or _class_docstring(tree, key[0]) or titles[step]
        later = _later_lines(listing, path, node, step)
        stubs.append(Stub(path, key, step, f"step {step:02d}: write {_signature(key[0], node)}: {hint}", later))
    stubs.sort(key=lambda s: (s.path, s.step))
    return stubs, left


def _reference_listing():
    """tinypytorch.utils.listing of this repository (its step tags), and the package imported from here."""
    if "tinypytorch" not in sys.modules:  # this repository's package, whatever an installed one says
        sys.path.insert(0, str(ROOT))
    import tinypytorch
    from tinypytorch.utils import listing
    where = pathlib.Path(tinypytorch.__file__).resolve().parent
    if where != ROOT / "tinypytorch":
        sys.exit(f"workbook: tinypytorch was imported from {where}, not from this repository ({ROOT})")
    return listing


def _tag(node, tags, full_line):
    """(the step a definition is tagged with, the line of the tag) as tinypytorch.utils.listing reads tags
    (math.inf: `# speed` or `# no step`), or (None, None)."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    above = first
    while above - 1 in full_line:
        above -= 1
    if node.lineno - 1 not in full_line and node.lineno - 1 in tags:
        return tags[node.lineno - 1], node.lineno
    if above < first and above in tags:
        return tags[above], above + 1
    return None, None


def _class_tags(tree, tags, full_line, reasons):
    """{qualified class name: (step, reason)} for the tagged classes of a module."""
    found = {}

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                tag, line = _tag(node, tags, full_line)
                name = prefix + node.name
                reason = reasons.get(line)
                if tag is None and prefix.rstrip(".") in found:
                    tag, reason = found[prefix.rstrip(".")]
                if tag is not None:
                    found[name] = (tag, reason)
                walk(node.body, name + ".")

    walk(tree.body, "")
    return found


def _tag_reasons(source):
    """{line: the reason after `# step NN:` on that line}, for hints."""
    reasons = {}
    for token in tokenize.generate_tokens(iter(source.splitlines(keepends=True)).__next__):
        if token.type == tokenize.COMMENT:
            match = re.match(r"#\s*step \d+[^:]*:\s*(.+)", token.string)
            if match:
                reasons[token.start[0]] = match.group(1).strip()
    return reasons


def _shown(number):
    """(path, qualified name) of each package object that steps/stepNN.py shows with `show_code`."""
    source = (ROOT / "steps" / f"step{number:02d}.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    namespace = {}
    for node in tree.body:
        if isinstance(node, ast.Import) and all(a.name.startswith("tinypytorch") for a in node.names) \
                or isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinypytorch"):
            exec(compile(ast.Module([node], type_ignores=[]), "<imports>", "exec"), namespace)
    shown = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "show_code":
            for argument in node.args:
                try:
                    obj = eval(compile(ast.Expression(argument), "<show_code>", "eval"), namespace)
                except Exception:  # noqa: BLE001 (an argument made by the page itself: not package code)
                    continue
                obj = getattr(obj, "fget", obj)
                try:
                    file = pathlib.Path(inspect.getsourcefile(obj)).resolve()
                except TypeError:
                    continue
                if ROOT / "tinypytorch" in file.parents:
                    shown.append((str(file.relative_to(ROOT)), obj.__qualname__))
    return shown


ROLES = {  # what a method of these names does, for the hint of one without a docstring
    "forward": "compute the output from the inputs",
    "backward": "return the gradient of each input, given the gradient of the output",
}


def _role(qualname):
    owner, _, name = qualname.rpartition(".")
    return ROLES.get(name) if owner else None


def _later_lines(listing, path, node, step):
    """The lines of `node`'s body tagged with a step after `step` (with the comment lines just above them),
    dedented as the body: the package already needs them, so the stub lists them for the learner to keep."""
    source = (ROOT / path).read_text(encoding="utf-8")
    lines = source.splitlines()
    tags, full_line = listing._step_tags(source, lines)
    dropped = set()
    for statement in node.body:
        for child in ast.walk(statement):
            if isinstance(child, ast.stmt):
                dropped |= listing._lines_if_later(child, lines, tags, full_line, step)
    listing._drop_emptied_blocks(ast.Module(body=node.body, type_ignores=[]), dropped, lines)
    indent = node.body[0].col_offset
    return tuple(lines[i][indent:] if lines[i][:indent].isspace() else lines[i].strip() for i in sorted(dropped))


def _docstring(node):
    """The first sentence of the docstring's first paragraph, on one line, or None."""
    text = ast.get_docstring(node)
    if not text:
        return None
    paragraph = " ".join(line.strip() for line in text.strip().split("\n\n")[0].splitlines())
    sentence = re.match(r"(.+?[.:;])(\s|$)", paragraph)
    return (sentence.group(1) if sentence else paragraph).rstrip(":;")


def _class_docstring(tree, qualname):
    """The first line of the docstring of the class that holds method `qualname`, or None."""
    owner = qualname.rpartition(".")[0]
    if not owner:
        return None
    body = tree.body
    node = None
    for name in owner.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    text = _docstring(node)
    return f"{owner}: {text}" if text else None


def _signature(qualname, node):
    return f"{qualname}({ast.unparse(node.args)})"


# ----- writing a workbook ----------------------------------------------------------------------------------

def build(into, stubs, solved_through=0):
    """Write a workbook into the new folder `into`: steps/ and tinypytorch/ of this repository, with `stubs`
    of the steps after `solved_through` written as stubs."""
    into = pathlib.Path(into)
    into.mkdir(parents=True)
    shutil.copytree(ROOT / "steps", into / "steps", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tinypytorch", into / "tinypytorch",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    by_path = {}
    for stub in stubs:
        if stub.step > solved_through:
            by_path.setdefault(stub.path, []).append(stub)
    for path, file_stubs in by_path.items():
        target = into / path
        target.write_text(stubbed(target.read_text(encoding="utf-8"), file_stubs), encoding="utf-8")
    (into / "README.md").write_text(README.format(last=LAST), encoding="utf-8")


def stubbed(source, stubs):
    """`source` with the body of each definition in `stubs` replaced by its `raise NotImplementedError`."""
    wanted = {stub.key: stub for stub in stubs}
    tree = ast.parse(source)
    nodes = [(node, wanted[key]) for key, _, _, node in grading.definitions(tree) if key in wanted]
    missing = set(wanted) - {stub.key for _, stub in nodes}
    if missing:
        raise ValueError(f"no such definitions: {sorted(missing)}")
    lines = source.splitlines(keepends=True)
    for node, stub in sorted(nodes, key=lambda pair: -pair[0].lineno):  # bottom up: line numbers hold
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        colon_row, colon_col = _header_colon(lines, node.lineno)
        body = node.body
        own_line = body[0].lineno > colon_row
        indent = " " * (body[0].col_offset if own_line else node.col_offset + 4)
        header = lines[first - 1:colon_row - 1]
        header.append(lines[colon_row - 1] if own_line else lines[colon_row - 1][:colon_col + 1] + "\n")
        docstring = []
        if ast.get_docstring(node, clean=False) is not None:
            document = body[0]
            if document.lineno > colon_row:
                docstring = lines[document.lineno - 1:document.end_lineno]
            else:
                docstring = [indent + repr(document.value.value) + "\n"]
        later = []
        if stub.later:
            later = [f"{indent}# The package's version also has these lines, of later steps: write them in too, "
                     "the rest\n", f"{indent}# of the package relies on them.\n"]
            later += [f"{indent}#     {line}".rstrip() + "\n" for line in stub.later]
        stub_line = f"{indent}raise NotImplementedError({json.dumps(stub.message, ensure_ascii=False)})\n"
        lines[first - 1:node.end_lineno] = header + docstring + later + [stub_line]
    result = "".join(lines)
    check = {key: grading.stub_step(node) for key, _, _, node in grading.definitions(ast.parse(result))}
    assert all(check[stub.key] == stub.step for stub in stubs), "a stub does not read back as one"
    return result


def _header_colon(lines, row):
    """(row, column) of the colon that ends the `def` header starting on line `row` (1-based)."""
    text = "".join(lines[row - 1:])
    depth = 0
    for token in tokenize.generate_tokens(iter(text.splitlines(keepends=True)).__next__):
        if token.type == tokenize.OP:
            if token.string in "([{":
                depth += 1
            elif token.string in ")]}":
                depth -= 1
            elif token.string == ":" and depth == 0:
                return row + token.start[0] - 1, token.start[1]
    raise ValueError(f"no header colon after line {row}")


def called_on_import(workbook, stubs):
    """The stubs that importing the stubbed package (every module of it) runs into, one at a time, or None
    when the import runs into none. Each is then left written: `import tinypytorch` must work."""
    workbook = pathlib.Path(workbook).resolve()
    program = (
        "import importlib, json, pkgutil, sys, traceback\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import workbook_grading\n"
        f"workbook_grading.install({str(workbook)!r}, 10**6)\n"
        "def hit(error):\n"
        "    frame = traceback.extract_tb(error.__traceback__)[-1]\n"
        "    print(json.dumps([frame.filename, frame.lineno])); sys.exit(3)\n"
        "try:\n"
        "    import tinypytorch\n"
        "except Exception as error:\n"
        "    hit(error) if workbook_grading.is_stub_error(error) else None; raise\n"
        "for module in pkgutil.walk_packages(tinypytorch.__path__, 'tinypytorch.', onerror=lambda name: None):\n"
        "    try:\n"
        "        importlib.import_module(module.name)\n"
        "    except Exception as error:\n"
        "        if workbook_grading.is_stub_error(error): hit(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=workbook, capture_output=True, text=True,
                            env=dict(os.environ, MPLBACKEND="Agg"))
    if result.returncode == 0:
        return None
    if result.returncode != 3:
        raise RuntimeError(f"importing the workbook's package failed:\n{result.stderr[-3000:]}")
    filename, line = json.loads(result.stdout.strip().splitlines()[-1])
    relative = str(pathlib.Path(filename).resolve().relative_to(pathlib.Path(workbook).resolve()))
    tree = ast.parse((pathlib.Path(workbook) / relative).read_text(encoding="utf-8"))
    for key, _, _, node in grading.definitions(tree):
        if node.lineno <= line <= node.end_lineno:
            for stub in stubs:
                if stub.path == relative and stub.key == key:
                    return stub
    raise RuntimeError(f"importing the workbook's package ran into a stub at {relative}:{line} that is not one")


def make(into, last=LAST, solved_through=0):
    """Plan and write a workbook into `into`, leaving written each stub that the package's import calls.
    Returns (stubs, left): what is stubbed, and what was left written and why."""
    stubs, left = plan(last)
    while True:
        build(into, stubs, solved_through)
        culprit = called_on_import(into, [s for s in stubs if s.step > solved_through])
        if culprit is None:
            return stubs, left
        stubs = [s for s in stubs if s != culprit]
        left.append((culprit.path, culprit.name, culprit.step, "called while the package is imported"))
        shutil.rmtree(into)


README = """\
# Your workbook

This folder is yours: `make workbook` wrote it once and never writes over it. It holds
`steps/` and `tinypytorch/` as the repository does, but where a step of 01-{last} introduces a
function or a method, its body is a stub:

    def backward(self, gy):
        raise NotImplementedError("step 14: write ...: what it does")

Replace the `raise` line by your code (keep the signature and the docstring). Steps 01-22 are
whole snapshots: `steps/step14.py` holds its own `Variable`, `Function`, ... and only what step 14
added or changed is a stub. From step 23 on, the package is the framework: find a step's stubs
with `grep -rn '"step 26:' tinypytorch steps`.

    make grade STEP=14     # the step's own tests, PyTorch checks included, on your code

lists what passes, and for each failing test the first line of its error: a stub's message says
what is still to write. Stubs of later steps that you have not touched yet do not count against
an earlier step: grading runs the book's code for them.

    .venv/bin/python tools/workbook.py run 14    # run your steps/step14.py, as the page does
"""


# ----- grading -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Grade:
    passed: list
    failed: list  # [(test id, first line of its error)]
    skipped: list
    scripts: list  # [(script, [(line, error), ...])]: top-level statements skipped after a stub was called
    output: str

    @property
    def ok(self):
        return not self.failed and not any(skipped for _, skipped in self.scripts)


def grade(workbook, steps, graded=None, quick=False, first_failure=False):
    """Run the tests of `steps` on the workbook in one pytest process; `graded` (default: the last of `steps`)
    is the step whose later stubs run the repository's code. Hypothesis draws the examples `make test` draws
    (profile "grade", tests/conftest.py), or 5 a test if `quick`; `first_failure`: each test file stops at its
    first failure. Returns {step: Grade}."""
    workbook = pathlib.Path(workbook).resolve()
    files = [f"tests/test_step{n:02d}{suffix}.py" for n in steps for suffix in ("", "_lesson")
             if (ROOT / f"tests/test_step{n:02d}{suffix}.py").exists()]
    with tempfile.TemporaryDirectory() as scratch:
        report, notes = pathlib.Path(scratch) / "report.xml", pathlib.Path(scratch) / "notes.jsonl"
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # (a parent run's -n, say)
        env.update(TINYPYTORCH_WORKBOOK=str(workbook),
                   TINYPYTORCH_GRADE_STEP=str(graded if graded is not None else max(steps)),
                   TINYPYTORCH_GRADE_NOTES=str(notes))
        env["HYPOTHESIS_PROFILE"] = "quick" if quick else os.environ.get("HYPOTHESIS_PROFILE", "grade")
        if first_failure:
            env["TINYPYTORCH_GRADE_FIRST_FAILURE"] = "1"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                   "--continue-on-collection-errors", f"--junitxml={report}", *files]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if not report.exists():
            raise RuntimeError(f"pytest did not run (exit status {result.returncode}):\n{result.stdout[-3000:]}"
                               f"\n{result.stderr[-3000:]}")
        grades = {n: Grade([], [], [], [], result.stdout + result.stderr) for n in steps}
        for case in ElementTree.parse(report).iter("testcase"):
            module = case.get("classname") or case.get("name")  # a collection error has no class name
            match = re.search(r"test_step(\d+)", module)
            if not match or int(match.group(1)) not in grades:
                continue
            entry = grades[int(match.group(1))]
            file = module.rpartition(".")[2] + ".py"
            test = f"{file}::{case.get('name')}" if case.get("classname") else f"{file} (while collecting it)"
            problems = [child for child in case if child.tag in ("failure", "error")]
            if problems:
                entry.failed.append((test, _first_error_line(problems[0])))
            elif case.find("skipped") is not None:
                entry.skipped.append(test)
            else:
                entry.passed.append(test)
        if notes.exists():
            for line in notes.read_text(encoding="utf-8").splitlines():
                note = json.loads(line)
                number = int(re.search(r"step(\d+)", note["script"]).group(1))
                if number in grades:
                    grades[number].scripts.append((note["script"], note["skipped"]))
    return grades


EXCEPTION_LINE = re.compile(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Exit|Group|Interrupt)\b.*)$")
LOCATION = re.compile(r'File "([^"]+)", line (\d+)')


def _first_error_line(element):
    """The first line of the error a junit failure or error records: a stub's message wherever it is (inside an
    exception group too), else the first exception line (`Type: message`, with the place of a syntax error), else
    the first line pytest marked `E`."""
    text = element.text or ""
    stub = re.search(r"NotImplementedError: step \d+:.*", text)  # what is still to write
    if stub:
        return stub.group(0).strip()
    marked = [line for line in text.splitlines() if line.startswith("E ")]
    for number, line in enumerate(marked):
        match = EXCEPTION_LINE.match(line)
        if match:
            found = match.group(1).strip()
            if found.startswith(("SyntaxError", "IndentationError", "TabError")):
                places = [LOCATION.search(m) for m in marked[:number]]
                places = [p for p in places if p]
                if places:
                    found += f" ({places[-1].group(1)}, line {places[-1].group(2)})"
            return found
    if marked:
        return marked[0][1:].strip()
    message = (element.get("message") or "").strip()
    return message.splitlines()[0] if message else "(no message)"


def untouched(workbook, step):
    """The stubs of `step` in the workbook that are still stubs: [(path, name)]."""
    found = []
    workbook = pathlib.Path(workbook)
    for folder in ("steps", "tinypytorch"):
        for file in sorted((workbook / folder).rglob("*.py")):
            source = file.read_text(encoding="utf-8")
            if grading.STUB_MARK not in source:
                continue
            try:
                tree = ast.parse(source)
            except SyntaxError:  # the tests report it
                continue
            for key, _, _, node in grading.definitions(tree):
                if grading.stub_step(node) == step:
                    found.append((str(file.relative_to(workbook)), key[0]))
    return found


def print_grade(step, entry, workbook):
    total = len(entry.passed) + len(entry.failed)
    print(f"step {step:02d}: {len(entry.passed)} of {total} tests pass, {len(entry.failed)} fail"
          + (f", {len(entry.skipped)} skipped" if entry.skipped else "") + f"  (your code in {workbook})")
    for test, error in entry.failed:
        print(f"  FAIL {test}\n       {error}")
    for script, skipped in entry.scripts:
        line, error = skipped[0]
        print(f"  {script} did not run through: {len(skipped)} top-level statement(s) skipped after a stub"
              f" was called, the first at line {line}: {error}")
    left = untouched(workbook, step)
    if left:
        print(f"  still stubs of step {step:02d}: " + ", ".join(f"{name} ({path})" for path, name in left))
    if entry.ok and total:
        print(f"step {step:02d} passes.")


# ----- the command line ----------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="write a workbook")
    build_parser.add_argument("--into", default=str(ROOT / "workbook"))
    build_parser.add_argument("--solved-through", type=int, default=0, metavar="NN",
                              help="write the steps up to NN as the repository has them (0: none)")
    grade_parser = commands.add_parser("grade", help="run a step's tests on the workbook")
    grade_parser.add_argument("step", type=int)
    grade_parser.add_argument("--workbook", default=str(ROOT / "workbook"))
    grade_parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output too")
    run_parser = commands.add_parser("run", help="run the workbook's steps/stepNN.py on the workbook's package")
    run_parser.add_argument("step", type=int)
    run_parser.add_argument("--workbook", default=str(ROOT / "workbook"))
    list_parser = commands.add_parser("list", help="the stubs of each step, and what was left written")
    list_parser.add_argument("step", type=int, nargs="?")
    args = parser.parse_args(argv)

    if args.command == "build":
        into = pathlib.Path(args.into)
        if into.exists():
            sys.exit(f"{into} exists: it holds your answers, and is never written over. To start again, "
                     f"move it away (or delete it) and run this again.")
        start = time.perf_counter()
        stubs, left = make(into, solved_through=args.solved_through)
        count = sum(1 for s in stubs if s.step > args.solved_through)
        written = f", steps 01-{args.solved_through:02d} written" if args.solved_through else ""
        print(f"wrote {into}: {count} stubs to fill in{written} ({time.perf_counter() - start:.1f} s); "
              "grade a step with `make grade STEP=NN`")
        return 0
    if args.command == "list":
        stubs, left = plan()
        steps = [args.step] if args.step else range(1, LAST + 1)
        for n in steps:
            print(f"step {n:02d}:")
            for stub in (s for s in stubs if s.step == n):
                print(f"  {stub.path}: {stub.name}")
            for path, name, step, why in left:
                if step == n:
                    print(f"  (left written) {path}: {name}: {why}")
        return 0
    workbook = pathlib.Path(args.workbook)
    if not (workbook / "steps").is_dir():
        sys.exit(f"no workbook in {workbook}: write one with `make workbook`")
    if not 1 <= args.step <= LAST:
        sys.exit(f"steps 01-{LAST:02d} are gradeable, not {args.step}")
    if args.command == "run":
        program = ("import runpy, sys\n"
                   f"sys.path.insert(0, {str(TESTS)!r})\n"
                   "import workbook_grading\n"
                   f"workbook_grading.install({str(workbook.resolve())!r}, {args.step})\n"
                   f"runpy.run_path({str(workbook.resolve() / 'steps' / f'step{args.step:02d}.py')!r},"
                   " run_name='__main__')\n")
        return subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=dict(os.environ, MPLBACKEND="Agg"),
                              ).returncode
    entry = grade(workbook, [args.step])[args.step]
    if args.verbose:
        print(entry.output)
    print_grade(args.step, entry, workbook)
    return 0 if entry.ok else 1


if __name__ == "__main__":
    sys.exit(main())
