"""`make workbook` and `make grade STEP=NN` (tools/workbook.py): grading fails on stubs and passes on written code.

A workbook is built as `make workbook` builds it, and every gradeable step (01-LAST):

- fails its grade on the untouched workbook: the step's tests reach stubs, so grading runs the workbook's
  code and not the repository's;
- passes its grade on a workbook written up to some step at or after it (the repository's code there) whose
  later steps are still stubs, as a learner's is: written code passes, and a later step's untouched stubs,
  which grading runs as the repository's code, do not count against it.

Cost: about 2 minutes on one core, nearly all of it the pytest processes that grade. To keep it there,
grading here draws hypothesis's "quick" profile (5 examples a test where `make test`, which runs these tests on
the repository's code in full, draws 60); a failing test file stops at its first failure; and one process
grades several steps where that changes nothing: steps 01-22 (each has its own script, and every stub of the
package is of a later step), and on a workbook written through step NN every step up to NN (a step before NN
sees the same later stubs as NN: the ones after NN). Only the failing grades of steps 23-LAST take a process
each, since each is graded with its own later steps' stubs running the repository's code.
"""
import ast
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("workbook_tool", ROOT / "tools" / "workbook.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

SNAPSHOTS, LAST = tool.SNAPSHOTS, tool.LAST
WRITTEN_THROUGH = (SNAPSHOTS, 28, LAST)  # the workbooks that pass: steps 01-22, 23-28 and 29-LAST


@pytest.fixture(scope="module")
def untouched(tmp_path_factory):
    """(folder, stubs) of a workbook as `make workbook` writes it."""
    folder = tmp_path_factory.mktemp("workbook") / "workbook"
    stubs, _ = tool.make(folder)
    return folder, stubs


def test_every_gradeable_step_has_stubs_and_the_stubbed_package_imports(untouched):
    folder, stubs = untouched  # tool.make imported every module of the stubbed package
    assert {stub.step for stub in stubs} == set(range(1, LAST + 1))
    assert tool.untouched(folder, 14) and not tool.untouched(folder, LAST + 1)


def test_a_stub_keeps_signature_decorators_and_docstring_and_says_what_to_write():
    source = (
        "class A:\n"
        "    @property\n"
        "    def f(self, x=1, *, y):  # step 26\n"
        '        """Twice x."""\n'
        "        # a comment that gives the answer away\n"
        "        return 2 * x\n"
        "\n"
        "    def g(self): return 1\n"
    )
    stubs = [tool.Stub("a.py", ("A.f", 1), 26, "step 26: write A.f: twice x", ("y = 1  # step 40: later",)),
             tool.Stub("a.py", ("A.g", 1), 3, 'step 03: write "g"')]
    text = tool.stubbed(source, stubs)
    assert text == (
        "class A:\n"
        "    @property\n"
        "    def f(self, x=1, *, y):  # step 26\n"
        '        """Twice x."""\n'
        "        # The package's version also has these lines, of later steps: write them in too, the rest\n"
        "        # of the package relies on them.\n"
        "        #     y = 1  # step 40: later\n"
        '        raise NotImplementedError("step 26: write A.f: twice x")\n'
        "\n"
        "    def g(self):\n"
        '        raise NotImplementedError("step 03: write \\"g\\"")\n'
    )
    steps = [tool.grading.stub_step(node) for _, _, _, node in tool.grading.definitions(ast.parse(text))]
    assert steps == [26, 3]


def test_a_definition_that_the_package_calls_while_it_is_imported_is_left_written(tmp_path, monkeypatch):
    called = tool.Stub("tinypytorch/core.py", ("formulas_on_arrays", 1), 30, "step 30: write formulas_on_arrays")
    other = tool.Stub("tinypytorch/testfunctions.py", ("sphere", 1), 24, "step 24: write sphere(x, y)")
    monkeypatch.setattr(tool, "plan", lambda last=LAST: ([called, other], []))
    folder = tmp_path / "workbook"
    stubs, left = tool.make(folder)  # classification.py, among others, calls formulas_on_arrays as it is imported
    assert stubs == [other]
    assert left == [("tinypytorch/core.py", "formulas_on_arrays", 30, "called while the package is imported")]
    assert tool.untouched(folder, 30) == []
    assert tool.untouched(folder, 24) == [("tinypytorch/testfunctions.py", "sphere")]


def test_building_refuses_to_write_over_a_workbook(tmp_path):
    (tmp_path / "workbook").mkdir()
    with pytest.raises(SystemExit, match="never written over"):
        tool.main(["build", "--into", str(tmp_path / "workbook")])


def failing(grades):
    return {step: entry.failed for step, entry in grades.items()}


def test_the_untouched_workbook_fails_steps_01_to_22(untouched):
    folder, _ = untouched
    grades = tool.grade(folder, list(range(1, SNAPSHOTS + 1)), quick=True, first_failure=True)
    assert [step for step, entry in grades.items() if not entry.failed] == []
    # the failures are the stubs' own, not an error of grading
    assert all(any("NotImplementedError: step" in error for _, error in entry.failed)
               for entry in grades.values()), failing(grades)


@pytest.mark.parametrize("step", range(SNAPSHOTS + 1, LAST + 1))
def test_the_untouched_workbook_fails_each_package_step(untouched, step):
    folder, _ = untouched
    entry = tool.grade(folder, [step], quick=True, first_failure=True)[step]
    assert entry.failed and "NotImplementedError: step" in entry.failed[0][1], entry.output[-3000:]


@pytest.mark.parametrize("through", WRITTEN_THROUGH)
def test_a_workbook_written_through_a_step_passes_it_and_the_steps_before(untouched, tmp_path, through):
    _, stubs = untouched
    first = max([0, *(t for t in WRITTEN_THROUGH if t < through)]) + 1
    folder = tmp_path / "workbook"
    tool.build(folder, stubs, solved_through=through)
    assert not tool.untouched(folder, through) and (through == LAST or tool.untouched(folder, through + 1))
    grades = tool.grade(folder, list(range(first, through + 1)), graded=through, quick=True)
    for step, entry in grades.items():
        assert entry.passed and entry.ok, (step, entry.failed[:5], entry.scripts, entry.output[-3000:])
