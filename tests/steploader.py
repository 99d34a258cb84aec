"""Import a step script (steps/stepNN.py) as a module, once per test session.

Steps 01-22 are self-contained snapshots of the framework, so their tests load
the script itself: the classes under test are exactly the ones the reader sees.
Loading runs the script top to bottom; its printed output is discarded.

`load_step` returns a lazy stand-in that runs the script on first attribute
access, so `pytest -m step07` does not run every other step while collecting.
"""
import contextlib
import importlib.util
import io
import pathlib
import sys

STEPS = pathlib.Path(__file__).resolve().parent.parent / "steps"
_loaded = {}


def _run_step(name):
    if name not in _loaded:
        spec = importlib.util.spec_from_file_location(f"steps.{name}", STEPS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses, pickling and weakref need a real module
        with contextlib.redirect_stdout(io.StringIO()):
            spec.loader.exec_module(module)
        _loaded[name] = module
    return _loaded[name]


class _Step:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):  # only called for names not set in __init__
        return getattr(_run_step(self._name), attribute)

    def __repr__(self):
        return f"<step script {self._name}>"


def load_step(number):
    """Return steps/stepNN.py (NN = `number`) as a module, run on first attribute access."""
    return _Step(f"step{number:02d}")
