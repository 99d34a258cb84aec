"""Import a step script (steps/stepNN.py) as a module, once per test session.

Steps 01-22 are self-contained snapshots of the framework, so their tests load
the script itself: the classes under test are exactly the ones the reader sees.
Loading runs the script top to bottom; its printed output is discarded.

The module is lazy (importlib's LazyLoader): the script runs on first attribute
access, so `pytest -m step07` does not run every other step while collecting.

When a learner's workbook is graded (`make grade STEP=NN`, tests/workbook_grading.py), the scripts
are the workbook's, run as workbook_grading.exec_step runs them.
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import pathlib
import sys

import workbook_grading

STEPS = pathlib.Path(__file__).resolve().parent.parent / "steps"
GRADING = workbook_grading.from_environment()  # (workbook, step graded), or None
if GRADING is not None:
    STEPS = GRADING[0] / "steps"


class _QuietLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module):
        # a step that sets the default dtype (steps 52-56: float64) sets it for its page, not for whatever test or
        # module is collected after it loads
        default = _default_dtype()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                if GRADING is None:
                    super().exec_module(module)
                else:
                    workbook_grading.exec_step(module, self.path, GRADING[1])
        finally:
            if default is not None:
                sys.modules["tinypytorch"].set_default_dtype(default)


def _default_dtype():
    package = sys.modules.get("tinypytorch")  # the snapshot steps (01-22) import no package
    return None if package is None else package.get_default_dtype()


def load_step(number):
    """Return steps/stepNN.py (NN = `number`) as a module that runs on first use."""
    name = f"steps.step{number:02d}"
    if name not in sys.modules:
        path = STEPS / f"step{number:02d}.py"
        loader = importlib.util.LazyLoader(_QuietLoader(name, str(path)))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses, pickling and weakref need a real module
        loader.exec_module(module)  # lazy: only arms the module
    return sys.modules[name]
