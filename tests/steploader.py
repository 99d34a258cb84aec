"""Import a step script (steps/stepNN.py) as a module, once per test session.

Steps 01-22 are self-contained snapshots of the framework, so their tests load
the script itself: the classes under test are exactly the ones the reader sees.
Loading runs the script top to bottom; its printed output is discarded.

The module is lazy (importlib's LazyLoader): the script runs on first attribute
access, so `pytest -m step07` does not run every other step while collecting.
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import pathlib
import sys

STEPS = pathlib.Path(__file__).resolve().parent.parent / "steps"


class _QuietLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module):
        with contextlib.redirect_stdout(io.StringIO()):
            super().exec_module(module)


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
