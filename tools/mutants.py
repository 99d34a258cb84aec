"""Mutation audit: put one plausible bug at a time into a copy of the package or a step, run the tests
that should notice, and report which bugs survive.

    python tools/mutants.py            # every mutation (a few minutes)
    python tools/mutants.py linear     # only those whose name contains "linear"

`make mutants` runs it; CI does not. A mutation is (name, file, the text to replace, its
replacement, the tests to run). Each runs in a fresh copy of tinypytorch/, steps/, tests/ and
the project files, imported ahead of the installed package. A mutation is *caught* when those
tests fail, and *survives* when they pass: then the tests have a hole. A text that is not
found exactly once is reported as stale, so the list keeps up with the code.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
COPIED = ["tinypytorch", "steps", "tests", "notebooks", "pyproject.toml"]

MUTATIONS = [
    # the five that an earlier audit found surviving
    ("linear: the input's gradient no longer depends on W", "tinypytorch/functions.py",
     "gx = matmul(gy, W) if self.needs_input_grad[0] else None",
     "gx = matmul(gy, W.data) if self.needs_input_grad[0] else None",
     ["tests/test_operations.py", "tests/test_step31.py"]),
    ("mean_squared_error: no second derivative through the target", "tinypytorch/functions.py",
     "        return gx0, -gx0\n", "        return gx0, -gx0.data\n",
     ["tests/test_operations.py", "tests/test_step32.py"]),
    ("indexing: the gradient of x[key] cut off from the graph", "tinypytorch/functions.py",
     "        return get_item(ggx, self.key)", "        return get_item(ggx.data, self.key)",
     ["tests/test_operations.py", "tests/test_step31.py"]),
    ("step 22's pow: |x| instead of x in the derivative", "steps/step22.py",
     "        return c * x ** (c - 1) * gy  # dy/dx = c x^(c-1)",
     "        return c * np.abs(x) ** (c - 1) * gy  # dy/dx = c x^(c-1)",
     ["tests/test_step22.py"]),
    ("tanh: a float32 input gets a float64 gradient", "tinypytorch/functions.py",
     "        return gy * (1 - y * y)",
     "        return gy * (1 - y * y) * as_variable(np.array(1.0))",
     ["tests/test_operations.py"]),
    # stage 4
    ("mul: saves both factors whatever needs a gradient", "tinypytorch/core.py",
     "        self.save_for_backward(x0 if needs[1] else None, x1 if needs[0] else None)",
     "        self.save_for_backward(x0, x1)",
     ["tests/test_step35.py"]),
    ("exp: saves its input instead of its output", "tinypytorch/functions.py",
     "        y = xp.exp(x)\n        self.save_for_backward(y)",
     "        y = xp.exp(x)\n        self.save_for_backward(x)",
     ["tests/test_step35.py", "tests/test_operations.py"]),
    ("engine: saved tensors never freed", "tinypytorch/autograd/engine.py",
     "            f.release_saved()", "            pass",
     ["tests/test_step35.py"]),
    ("saved tensors: no version check", "tinypytorch/autograd/graph.py",
     "        if self.counter.value != self.version:  # step 36: changed in place since it was saved",
     "        if False:  # step 36: changed in place since it was saved",
     ["tests/test_step36.py"]),
    ("in-place: a leaf that requires grad may change", "tinypytorch/inplace.py",
     "        if x.creator is None and x.view_record is None:", "        if False:",
     ["tests/test_step36.py"]),
    ("in-place on a view: the base keeps its old place in the graph", "tinypytorch/inplace.py",
     "    take_place(base, new_base)\n", "",
     ["tests/test_step37.py"]),
    ("views: a copy of the counter instead of the shared one", "tinypytorch/views.py",
     "    share_version_counter(y, x.version_counter)\n", "",
     ["tests/test_step37.py"]),
    ("hooks: the outermost pair instead of the innermost", "tinypytorch/autograd/graph.py",
     "            self._pack(variable, function, is_output, *hooks[-1])",
     "            self._pack(variable, function, is_output, *hooks[0])",
     ["tests/test_step38.py"]),
    ("hooks: the in-place check skipped for hooked tensors", "tinypytorch/autograd/graph.py",
     "        if is_original and self.counter.value != self.version:",
     "        if False:",
     ["tests/test_step38.py"]),
    ("anomaly mode: NaN not looked for", "tinypytorch/autograd/anomaly.py",
     "            if data is not None and cuda.get_array_module(data).isnan(data).any():",
     "            if False:",
     ["tests/test_step39.py"]),
    ("gradcheck: rtol ignored", "tinypytorch/autograd/gradcheck.py",
     "        if not np.allclose(got, expected, rtol=rtol, atol=atol):",
     "        if not np.allclose(got, expected, rtol=1.0, atol=atol):",
     ["tests/test_step40.py"]),
    # earlier stages
    ("relu: slope 1 at x = 0", "tinypytorch/functions.py",
     "        return gy * (array_of(y) > 0).astype(gy.dtype)", "        return gy * (array_of(y) >= 0).astype(gy.dtype)",
     ["tests/test_step32.py", "tests/test_operations.py"]),
    ("broadcasting: the second operand's gradient not summed back", "tinypytorch/core.py",
     "            gx1 = None if gx1 is None else sum_to(gx1, self.shapes[1])", "            pass",
     ["tests/test_step30.py", "tests/test_operations.py"]),
    ("reversible: a block's hidden weights not refused (their gradient silently lost)", "tinypytorch/reversible.py",
     "        if isinstance(node, Variable) or node.sequence_nr <= since:",
     "        if False:",
     ["tests/test_step46.py", "tests/test_step47.py"]),
    ("BatchNorm: a recomputation counts the batch again", "tinypytorch/layers.py",
     "        if not recomputation.is_recomputing():", "        if True:",
     ["tests/test_step45.py"]),
    ("anomaly mode: the creation stack ends inside the package", "tinypytorch/autograd/anomaly.py",
     "    stack = traceback.extract_stack()[:-3]", "    stack = traceback.extract_stack()[:-2]",
     ["tests/test_step39.py"]),
    # step 48: the two failures a real GPU run found, which the strict stand-in for CuPy must catch without one
    ("GPU: in-place writes ask NumPy's writeable flag, which CuPy arrays lack", "tinypytorch/inplace.py",
     "    if _overlaps_itself(x.data):", "    if not x.data.flags.writeable:",
     ["tests/test_step48.py", "tests/test_step36.py"]),
    ("GPU: BatchNorm's running statistics stay NumPy arrays when the layer moves", "tinypytorch/layers.py",
     "                setattr(layer, name, cuda.to_device(getattr(layer, name), where))", "                pass",
     ["tests/test_step48.py"]),
    ("GPU: BatchNorm's evaluation scale computed by NumPy", "tinypytorch/layers.py",
     "            scale = (1.0 / xp.sqrt(self.running_var + self.eps)).astype(x.dtype)",
     "            scale = xp.asarray(1.0 / np.sqrt(self.running_var + self.eps), dtype=x.dtype)",
     ["tests/test_step48.py"]),
    ("GPU: dropout's mask drawn on the host and copied", "tinypytorch/functions.py",
     "        keep = random.uniform(x.shape, xp) >= self.p",
     "        keep = xp.asarray(random.default_generator().random(x.shape) >= self.p)",
     ["tests/test_step48.py", "tests/test_operations.py"]),
    # silently different from PyTorch: what a ported PyTorch program met
    ("AccumulateGrad: .grad takes the arriving gradient's array without a copy", "tinypytorch/autograd/engine.py",
     "        return Clone()(g) if g.requires_grad else Variable(g.data.copy(), requires_grad=False)",
     "        return Clone()(g) if g.requires_grad else g",
     ["tests/test_torch_parity.py"]),
    ("an integer leaf may require grad (its gradient truncated)", "tinypytorch/core.py",
     "            if data is not None and data.dtype.kind != \"f\":\n                raise RuntimeError(_cannot_require_grad(data.dtype))",
     "            pass",
     ["tests/test_torch_parity.py"]),
    ("a hook registered after an in-place change goes onto the old value", "tinypytorch/views.py",
     "    x._backward_hooks = None\n", "",
     ["tests/test_torch_parity.py", "tests/test_step36.py"]),
    ("retain_grad adds up the gradient of every version of an in-place changed variable", "tinypytorch/autograd/engine.py",
     "y is not None and y.creator is f and", "y is not None and",
     ["tests/test_torch_parity.py"]),
]


def copy_project(target):
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(source, target / name)


def run(mutation):
    name, path, old, new, tests = mutation
    with tempfile.TemporaryDirectory(prefix="mutant-") as folder:
        copy = pathlib.Path(folder)
        copy_project(copy)
        text = (copy / path).read_text()
        if text.count(old) != 1:
            return "stale", 0.0
        mutated = text.replace(old, new)
        try:
            compile(mutated, path, "exec")
        except SyntaxError:
            return "BROKEN", 0.0  # the mutation itself is not Python: fix the list
        (copy / path).write_text(mutated)
        env = dict(os.environ, PYTHONPATH=str(copy), MPLBACKEND="Agg", CI="true")
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                cwd=copy, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        output = result.stdout + result.stderr
        if re.search(rf"{re.escape(path)}:\d+: (NameError|ImportError)", output):
            return "BROKEN", seconds  # the mutated line itself cannot run: fix the list, it proves nothing
        if result.returncode == 2 and "Interrupted: 1 error during collection" in output:
            return "caught", seconds  # a step's own check failed while its tests loaded it
        if result.returncode not in (0, 1):
            return f"error (pytest exit {result.returncode})", seconds
        return ("caught" if result.returncode == 1 else "SURVIVED"), seconds


def main():
    chosen = [m for m in MUTATIONS if all(word in m[0] for word in sys.argv[1:])]
    print(f"{'mutation':66} {'result':9} {'s':>5}  tests")
    outcomes = []
    for mutation in chosen:
        outcome, seconds = run(mutation)
        outcomes.append(outcome)
        print(f"{mutation[0]:66} {outcome:9} {seconds:5.0f}  {', '.join(t.split('/')[-1] for t in mutation[4])}",
              flush=True)
    caught = outcomes.count("caught")
    print(f"\n{caught} of {len(outcomes)} mutations caught")
    for word, why in [("stale", "its text is no longer found exactly once in the code: update the row"),
                      ("BROKEN", "the mutated code does not run: fix the row")]:
        if word in outcomes:
            print(f"{outcomes.count(word)} {word}: {why}")
    return 0 if caught == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
