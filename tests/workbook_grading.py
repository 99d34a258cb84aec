"""Grading a learner's workbook (`make grade STEP=NN`, tools/workbook.py): a step's own tests run against the
workbook's package and step scripts instead of the repository's.

The environment switches it on, for the pytest process that tools/workbook.py starts:
TINYPYTORCH_WORKBOOK (the workbook's folder) and TINYPYTORCH_GRADE_STEP (the step graded). Then

- conftest.py calls `install` before anything imports the package: a finder first on `sys.meta_path`
  imports `tinypytorch` from the workbook, whatever `sys.path` and the editable install say;
- steploader.py loads `steps/stepNN.py` from the workbook with `exec_step`.

A stub is a definition whose body is `raise NotImplementedError("step NN: what to write")` (after its
docstring). Two rules make a step gradeable before the whole workbook is written:

- a stub the learner has not touched, of a step after the one graded, runs the repository's definition
  (`with_later_steps_written`): step 26 is graded before the hooks of step 34 are written, though every
  backward pass goes through them;
- a step script runs statement by statement (`exec_step`): once a statement has called a stub, a statement
  that fails is skipped and noted, so that the script's definitions all exist and each test reports the
  stub it reaches. Before any stub is called, an error stops the script as it does outside grading.
"""
import ast
import collections
import importlib.abc
import importlib.machinery
import json
import os
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent  # the repository, whose code is the reference
STUB_MESSAGE = re.compile(r"step (\d+):")
STUB_MARK = 'NotImplementedError("step '  # how a stub reads in the source (tools/workbook.py writes it)


def stub_step(node):
    """The step of `node` if it is an untouched stub: a def whose body is an optional docstring and
    `raise NotImplementedError("step NN: ...")`; else None."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise):
        return None
    error = body[0].exc
    if not (isinstance(error, ast.Call) and isinstance(error.func, ast.Name)
            and error.func.id == "NotImplementedError" and len(error.args) == 1
            and isinstance(error.args[0], ast.Constant) and isinstance(error.args[0].value, str)):
        return None
    match = STUB_MESSAGE.match(error.args[0].value)
    return int(match.group(1)) if match else None


def definitions(tree):
    """(key, body, index, node) for each module-level function and each method of a module-level (or nested)
    class: `body[index] is node`; key = (qualified name, n) for the n-th definition of that name there (a
    property's getter and setter share a name)."""
    seen = collections.Counter()

    def walk(body, prefix):
        for index, node in enumerate(body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                seen[name] += 1
                yield (name, seen[name]), body, index, node
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, prefix + node.name + ".")

    yield from walk(tree.body, "")


def with_later_steps_written(source, path, reference, step):
    """The module `source` (of file `path`) as an AST in which every untouched stub of a step after `step` is
    replaced by the definition of the same name in the file `reference`, placed on the stub's line."""
    tree = ast.parse(source, str(path))
    later = [(key, body, index, node) for key, body, index, node in definitions(tree)
             if (stub_step(node) or 0) > step]
    if later and reference.exists():
        written = {key: node for key, _, _, node in definitions(ast.parse(reference.read_text(), str(reference)))}
        for key, body, index, node in later:
            if key in written:
                body[index] = _on_line(written[key], node.lineno)
    return tree


def _on_line(node, line):
    """`node` with every position on `line`: a traceback through it points at the stub it stands for."""
    for child in ast.walk(node):
        if "lineno" in child._attributes:
            child.lineno = child.end_lineno = line
            child.col_offset = child.end_col_offset = 0
    return node


class _WorkbookLoader(importlib.machinery.SourceFileLoader):
    """Loads a workbook module that holds stubs, through `with_later_steps_written`, and caches no bytecode."""

    def __init__(self, fullname, path, reference, step):
        super().__init__(fullname, path)
        self.reference, self.step = reference, step

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = self.get_data(path).decode("utf-8")
        tree = with_later_steps_written(source, path, self.reference, self.step)
        return compile(tree, path, "exec", dont_inherit=True)


class _WorkbookFinder(importlib.abc.MetaPathFinder):
    """Finds `tinypytorch` and its modules in the workbook only."""

    def __init__(self, workbook, step):
        self.workbook, self.step = pathlib.Path(workbook).resolve(), step

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tinypytorch" and not fullname.startswith("tinypytorch."):
            return None
        where = [str(self.workbook)] if fullname == "tinypytorch" else path
        spec = importlib.machinery.PathFinder.find_spec(fullname, where)
        if spec is None or not str(spec.origin).endswith(".py"):
            return spec
        origin = pathlib.Path(spec.origin)
        if STUB_MARK in origin.read_text(encoding="utf-8"):
            reference = ROOT / origin.relative_to(self.workbook)
            spec.loader = _WorkbookLoader(fullname, str(origin), reference, self.step)
        return spec


def install(workbook, step):
    """Import `tinypytorch` from `workbook` from now on, stubs of steps after `step` written."""
    package = sys.modules.get("tinypytorch")
    workbook = pathlib.Path(workbook).resolve()
    if package is not None and workbook not in pathlib.Path(package.__file__).resolve().parents:
        raise RuntimeError(f"tinypytorch was imported from {package.__file__} before the workbook's finder "
                           "was installed")
    sys.meta_path.insert(0, _WorkbookFinder(workbook, step))


def from_environment():
    """(workbook folder, step graded) as the environment says, or None outside grading."""
    workbook = os.environ.get("TINYPYTORCH_WORKBOOK")
    if not workbook:
        return None
    return pathlib.Path(workbook).resolve(), int(os.environ.get("TINYPYTORCH_GRADE_STEP", "999"))


def is_stub_error(error):
    """True if `error`, or an error it was raised from or while handling, is a stub's NotImplementedError."""
    while error is not None:
        if isinstance(error, NotImplementedError) and STUB_MESSAGE.match(str(error)):
            return True
        error = error.__cause__ or error.__context__
    return False


def first_line(error):
    """`Type: the first line of the message`."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def exec_step(module, path, step):
    """Run the workbook's step script `path` in `module`, one top-level statement at a time (see the module's
    docstring). The statements skipped are noted in the file TINYPYTORCH_GRADE_NOTES names, if any."""
    path = pathlib.Path(path)
    tree = with_later_steps_written(path.read_text(encoding="utf-8"), path, ROOT / "steps" / path.name, step)
    skipped = []
    for statement in tree.body:
        code = compile(ast.Module([statement], type_ignores=[]), str(path), "exec", dont_inherit=True)
        try:
            exec(code, module.__dict__)
        except Exception as error:  # noqa: BLE001 (a learner's script may raise anything)
            if not skipped and not is_stub_error(error):
                raise
            skipped.append((statement.lineno, first_line(error)))
    notes = os.environ.get("TINYPYTORCH_GRADE_NOTES")
    if skipped and notes:
        with open(notes, "a", encoding="utf-8") as file:
            file.write(json.dumps({"script": f"steps/{path.name}", "skipped": skipped}) + "\n")


class FirstFailureOnly:
    """A pytest plugin that skips the rest of a test file once one of its tests failed: whether a step's grade
    fails, not how often, is what tests/test_workbook.py asks (TINYPYTORCH_GRADE_FIRST_FAILURE)."""

    def __init__(self):
        self.failed = set()

    def pytest_runtest_setup(self, item):
        if item.nodeid.split("::")[0] in self.failed:
            pytest.skip("an earlier test of this file failed")

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid.split("::")[0])
