"""A differential test that looks for the next difference from PyTorch.

The package promises that a PyTorch name used PyTorch's way gives PyTorch's result, dtype included, or a clear
error: never a silent difference. Here hypothesis draws programs over the operations x dtypes (bool, int32,
int64, float16, float32, float64) x operand kinds (a tensor with dimensions, a 0-d tensor, a Python number) x
views (reshape, transpose, slicing, then in-place changes through them) x in-place changes (add_, mul_, sub_,
div_, x[i] = v, copy_, zero_) x gradient hooks x modules' state dicts x nested transforms (forward over reverse).

A program is Python source written once against a framework module `fw` (tinypytorch and torch share the names:
fw.tensor, fw.exp, x.add_, fw.nn.Linear, fw.autograd.grad, ...). It runs line by line on both frameworks, and the
two runs are compared line by line: whether the line ran or raised, and the exception's type; the value it bound
(dtype, shape, requires_grad, is_leaf, values, and which earlier name it is); which tensors it changed in place, as
their version counters say; the gradients each backward pass left; then, at the end, every tensor of the program
again (an in-place change shows in its views and bases). A failing example prints the program: it runs as it stands
with `fw = torch` or `fw = tinypytorch`.

The drawn space leaves out the differences found and not fixed yet, each where it is left out with a comment that
starts "excluded until fixed:"; the deliberate differences of book/pytorch_users.md, citing it; and, with a comment
that starts "left out:", torch's own failures and the choices IEEE 754 leaves open (the sign of a zero, pow's special
values). Programs are drawn by running them on torch as they are drawn (Drawer), so that an exclusion is a question
about torch's values of an operation's operands. `make fuzz` draws new programs (HYPOTHESIS_PROFILE=fuzz), five
times as many.
"""
import copy
import dataclasses
import functools
import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch as tp
from reference import assert_close_to_torch, floats

pytestmark = [pytest.mark.torch]

FRAMEWORKS = (torch, tp)  # torch first: what the package is held to

# ----- programs -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Line:
    code: str  # Python source on `fw` and the program's names
    binds: str = None  # the name it binds, if any
    uses: tuple = ()  # the names it reads


class Program:
    """Lines to run one after the other; its repr, which hypothesis prints for a failing example, is the source."""

    def __init__(self, lines):
        self.lines = tuple(lines)

    def __repr__(self):
        return "Program('''\n" + "\n".join(line.code for line in self.lines) + "\n''')"


@functools.cache
def _compiled(code):
    return compile(code, "<program>", "exec")


# ----- running a program on one framework and observing it ------------------------------------------------------------

def _is_tensor(value):
    return isinstance(value, (torch.Tensor, tp.Variable))


def _dtype_name(dtype):
    return str(dtype)  # torch.float32 in both frameworks


def _attempt(read):
    """read(), or the type of the exception it raised: an observation never stops the run."""
    try:
        return read()
    except Exception as error:  # noqa: BLE001 (the type is what is compared)
        return ("raised", type(error))


def _observe_tensor(x):
    return {"dtype": _attempt(lambda: _dtype_name(x.dtype)), "shape": _attempt(lambda: tuple(x.shape)),
            "requires_grad": _attempt(lambda: x.requires_grad), "is_leaf": _attempt(lambda: x.is_leaf),
            "values": _attempt(lambda: np.array(x.detach().numpy(), copy=True))}


def observe(value):
    """What is compared of a value: a tensor's dtype, shape, requires_grad, is_leaf and values (a copy, so that a
    later in-place change does not reach back); dicts, tuples and lists element by element; a Python number by type
    and value; anything else (a module, a hook's handle) by nothing but its being there."""
    if _is_tensor(value):
        return _observe_tensor(value)
    if isinstance(value, dict):
        return {key: observe(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(observe(item) for item in value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return "object"


def _observe_grad(x):
    """The gradient a tensor holds: a leaf's, or a non-leaf's that retains it (torch warns and gives None for other
    non-leaves)."""
    def read():
        if x.is_leaf or x.retains_grad:
            return observe(x.grad)
        return "not kept"
    return _attempt(read)


def _tensors(namespace):
    """(name, tensor) for every tensor of the namespace, and for those in its dicts (a state dict's) as name[key]."""
    for name, value in namespace.items():
        if _is_tensor(value):
            yield name, value
        elif isinstance(value, dict) and not name.startswith("__"):
            yield from ((f"{name}[{key!r}]", item) for key, item in value.items() if _is_tensor(item))


def _versions(namespace):
    return {name: (id(x), _attempt(lambda x=x: x._version)) for name, x in _tensors(namespace)}


def _bumps(before, after):
    """Which tensors a line changed in place, as their version counters say, and by how many versions: the counters'
    changes, not their values (torch's deep copy and jacrev start at 1: they write their result in place; a gradient's
    counts how the engine summed it, which neither framework promises). A name bound anew is not a change."""
    changed = {}
    for name, (identity, version) in before.items():
        if name in after and after[name][0] == identity and after[name][1] != version:
            numbers = isinstance(version, int) and isinstance(after[name][1], int)
            changed[name] = after[name][1] - version if numbers else (version, after[name][1])
    return changed


def ask_grad_fns(namespace):
    """Read every tensor's grad_fn, as a print or a debugger would: torch brings a view's grad_fn up to date when it is
    read after an in-place change. Both runs, and the drawing, read them after every line, for two faults of torch
    2.13 where nothing has read it: registering a hook on a view of a non-leaf that x[i] = v changed crashes (a
    segmentation fault: base = torch.ones(2, 3, requires_grad=True) * 1; v = base[0]; v[0] = 1.0;
    v.register_hook(lambda g: None)), and a view whose base came to require grad by an in-place change is called
    a leaf (x = torch.tensor(0.75, requires_grad=True); b = torch.zeros(2, 1); v = b.reshape(-1); b *= x;
    v.div_(v) raises "a leaf Variable that requires grad is being used in an in-place operation")."""
    for _, value in _tensors(namespace):
        value.grad_fn  # noqa: B018


@dataclasses.dataclass
class Run:
    # per line: ("ok", observation, names it is, bumps), ("raised", type, message, bumps) or ("skipped",)
    trace: list
    final: dict  # name -> (observation, gradient observation), every tensor or dict of the namespace at the end


def run(fw, program):
    """Run `program` with `fw` line by line: a line that raises is recorded and the run goes on; a line that reads
    a name left unbound by a line that raised is skipped (so are its names)."""
    namespace = {"fw": fw, "copy": copy}
    trace, unbound = [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's and NumPy's warnings (division by zero, ...): not compared
        for line in program.lines:
            if unbound & set(line.uses):
                trace.append(("skipped",))
                unbound.add(line.binds)
                continue
            before = _versions(namespace)
            try:
                exec(_compiled(line.code), namespace)  # noqa: S102 (the drawn program, on fw)
            except Exception as error:  # noqa: BLE001 (the type is what is compared)
                trace.append(("raised", type(error), str(error), _bumps(before, _versions(namespace))))
                unbound.add(line.binds)
                continue
            finally:
                ask_grad_fns(namespace)
            bumps = _bumps(before, _versions(namespace))
            if line.binds is None:  # after a backward pass, the gradients it left
                passed = "backward(" in line.code
                grads = {name: _observe_grad(x) for name, x in _tensors(namespace)} if passed else None
                trace.append(("ok", grads, (), bumps))
                continue
            value = namespace[line.binds]
            same = tuple(name for name, other in namespace.items() if other is value and name != line.binds
                         and not name.startswith("__") and _is_tensor(value))
            trace.append(("ok", observe(value), same, bumps))
        final = {name: (observe(value), _observe_grad(value) if _is_tensor(value) else None)
                 for name, value in namespace.items() if _is_tensor(value) or isinstance(value, dict)
                 if not name.startswith("__")}
    return Run(trace, final)


# ----- comparing two runs ---------------------------------------------------------------------------------------------

# A float result is compared with a tolerance chosen by the coarsest floating dtype the program computes in (a float32
# value computed from float16 ones carries float16's rounding):
#   float64: reference.assert_close_to_torch (rtol 1e-10, atol 1e-12 at the scale of the result), the house's.
#   float32: rtol 1e-4 and atol 1e-4 at the scale of the result. Each operation may round differently in the two
#            libraries (NumPy's exp and sin against torch's vectorised kernels: a few ulp of 2**-23 = 1.2e-7), a
#            program chains up to a dozen of them forward and as many in backward, some of them differences of close
#            values: 1e-4 leaves room for hundreds of ulp, and a wrong formula, sign or gradient is off by far more.
#   float16: rtol 1e-2 and atol 1e-2 at the scale of the result, the same room in float16's ulp (2**-10 = 9.8e-4);
#            and a Python number meeting float16 is rounded to float16 first, where torch computes in float32 (a
#            deliberate difference, book/pytorch_users.md, "Tensors and factories"): one more ulp.
# Integers and bools are compared exactly. NaN and infinities must sit in the same places.
LOOSE = {"torch.float32": 1e-4, "torch.float16": 1e-2}
FLOATS_BY_PRECISION = ("torch.float16", "torch.float32", "torch.float64")


def _coarsest(run_):
    """The coarsest floating dtype any tensor of the run had at any time, or float64."""
    seen = set()

    def collect(observation):
        if isinstance(observation, dict) and "dtype" in observation:
            seen.add(observation["dtype"])
        elif isinstance(observation, dict):
            for item in observation.values():
                collect(item)
        elif isinstance(observation, tuple):
            for item in observation:
                collect(item)

    for entry in run_.trace:
        if entry[0] == "ok":
            collect(entry[1])
    for observation, gradient in run_.final.values():
        collect(observation)
        collect(gradient)
    return next((name for name in FLOATS_BY_PRECISION if name in seen), "torch.float64")


def _assert_values_close(actual, expected, coarsest, what):
    if expected.dtype.kind in "biu" or actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    # infinities and NaN in the same places, the same signs; the finite rest within the tolerance, its scale taken
    # from the finite values (for float32 and float16 too, which assert_close_to_torch does not serve)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(actual), finite, err_msg=f"{what}: where the values are finite")
    np.testing.assert_array_equal(actual[~finite], expected[~finite], err_msg=f"{what}: the infinities and NaN")
    actual, expected = actual[finite], expected[finite]
    if coarsest == "torch.float64":
        assert_close_to_torch(actual, expected, what)
        return
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=LOOSE[coarsest], atol=LOOSE[coarsest] * scale, err_msg=what)


def _assert_same_observation(ours, theirs, coarsest, what):
    if isinstance(theirs, dict) and "values" in theirs and isinstance(ours, dict) and "values" in ours:
        for key in ("dtype", "shape", "requires_grad", "is_leaf"):
            assert ours[key] == theirs[key], f"{what}: {key} {ours[key]!r}, torch's {theirs[key]!r}"
        if isinstance(theirs["values"], np.ndarray) and isinstance(ours["values"], np.ndarray):
            _assert_values_close(ours["values"], theirs["values"], coarsest, f"{what}: values")
        else:
            assert ours["values"] == theirs["values"], \
                f"{what}: values {ours['values']!r}, torch's {theirs['values']!r}"
    elif isinstance(theirs, dict) and isinstance(ours, dict):
        assert list(ours) == list(theirs), f"{what}: keys {list(ours)}, torch's {list(theirs)}"
        for key in theirs:
            _assert_same_observation(ours[key], theirs[key], coarsest, f"{what}[{key!r}]")
    elif isinstance(theirs, tuple) and isinstance(ours, tuple) and not (theirs and theirs[0] == "raised"):
        assert len(ours) == len(theirs), f"{what}: {len(ours)} items, torch's {len(theirs)}"
        for index, (a, b) in enumerate(zip(ours, theirs)):
            _assert_same_observation(a, b, coarsest, f"{what}[{index}]")
    elif isinstance(theirs, float) and isinstance(ours, float):
        _assert_values_close(np.array(ours), np.array(theirs), coarsest, what)
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{what}: {ours!r}, torch's {theirs!r}"


# Where torch raises RuntimeError for shapes that do not fit, the package raises ValueError, its type for shapes
# (ARCHITECTURE's "bad input"; book/pytorch_users.md, deliberate differences, says so of layer_norm): a deliberate
# difference, accepted for torch's messages about shapes only.
TORCH_SHAPE_MESSAGES = re.compile(r"must match the size|need to be at least 1D|Expected size for first two dim|"
                                  r"expects a tensor with <= 2 dimensions|shape '\[.*\]' is invalid|"
                                  r"shapes cannot be multiplied|size mismatch|expanded size|"
                                  r"doesn't match the broadcast shape|inconsistent tensor size|"
                                  r"number of sizes provided")


def _same_failure(ours, theirs):
    """Whether our ("raised", type, message) is torch's: the same exception type, or the deliberate ValueError for
    a shape."""
    return ours[1] is theirs[1] or (theirs[1] is RuntimeError and ours[1] is ValueError
                                    and TORCH_SHAPE_MESSAGES.search(theirs[2]) is not None)


def _describe(entry):
    if entry[0] == "raised":
        return f"raised {entry[1].__name__}: {entry[2][:300]}"
    return entry[0]


def assert_same_runs(program):
    """Run `program` on torch and on the package and assert every comparison above; the message names the line."""
    theirs, ours = (run(fw, program) for fw in FRAMEWORKS)
    coarsest = _coarsest(theirs)
    listing = "\n".join(f"{number:3d}  {line.code}" for number, line in enumerate(program.lines, 1))
    try:
        for number, (line, a, b) in enumerate(zip(program.lines, ours.trace, theirs.trace), 1):
            what = f"line {number}: {line.code}"
            assert (a[0], b[0]) != ("raised", "raised") or _same_failure(a, b), \
                f"{what}\n  tinypytorch {_describe(a)}\n  torch       {_describe(b)}"
            assert a[0] == b[0], f"{what}\n  tinypytorch {_describe(a)}\n  torch       {_describe(b)}"
            if a[0] == "ok":
                _assert_same_observation(a[1], b[1], coarsest, what)
                assert a[2] == b[2], f"{what}: the same object as {a[2]}, torch's as {b[2]}"
            if a[0] != "skipped":
                assert a[-1] == b[-1], f"{what}: changed in place (versions) {a[-1]}, torch's {b[-1]}"
        assert list(ours.final) == list(theirs.final), \
            f"names at the end: {list(ours.final)}, torch's {list(theirs.final)}"
        # What a backward pass that raised left in .grad is no contract: torch's engine runs the nodes in its own
        # order (an input's gradient may or may not be accumulated before the node that raises). The gradients of
        # every pass that ran were compared after its line.
        failed = any(entry[0] == "raised" and ("backward(" in line.code or "autograd.grad(" in line.code)
                     for line, entry in zip(program.lines, theirs.trace))
        for name, (a, b) in zip(theirs.final, zip(ours.final.values(), theirs.final.values())):
            _assert_same_observation(a[0], b[0], coarsest, f"{name} at the end")
            if not failed:
                _assert_same_observation(a[1], b[1], coarsest, f"{name}.grad at the end")
    except AssertionError as error:
        raise AssertionError(f"{error}\n\nthe program (fw = torch or tinypytorch):\n{listing}") from None
    return theirs


# ----- drawing programs -----------------------------------------------------------------------------------------------

DTYPES = ("bool", "int32", "int64", "float16", "float32", "float64")
FLOATING = ("float16", "float32", "float64")
LEAF_DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool", "float32", "float64", "float16")
SHAPES = ((3,), (2, 3), (2, 1), (1, 3))  # any two broadcast together, and to (2, 3)


def on_the_grid(value):
    """value rounded to a multiple of 1/8: the same number in float16, float32 and float64, so that a program's
    inputs do not depend on its dtypes, and ties (relu at 0, maximum of equal values) are exact in both runs."""
    return round(value * 8) / 8


def _element(draw, dtype):
    if dtype == "bool":
        return draw(st.booleans())
    if dtype in ("int32", "int64"):
        return draw(st.integers(-3, 3))
    return on_the_grid(draw(floats(-2.0, 2.0)))


def _nested(draw, dtype, shape):
    if not shape:
        return _element(draw, dtype)
    return [_nested(draw, dtype, shape[1:]) for _ in range(shape[0])]


@dataclasses.dataclass(frozen=True)
class Op:
    """A line's template ({t} the name it binds, {a} a tensor, {b} a second operand) and the operands it is not drawn
    for: unless(a, b) on torch's values of them (b None when the template has none)."""
    template: str
    unless: object = None

    def drawn_for(self, a, b):
        """Whether the Op is drawn for these operands; also where asking raises (shapes that do not broadcast): both
        frameworks then meet the same bad input."""
        return self.unless is None or not _result(lambda: self.unless(a, b))


def _tensor(x, *kinds):
    """Whether x is a torch tensor whose dtype's kind (NumPy's letters: b bool, i integer, f floating) is in kinds."""
    return isinstance(x, torch.Tensor) and (not kinds or {torch.bool: "b"}.get(x.dtype, "f" if x.is_floating_point()
                                                                                else "i") in kinds)


def _result(compute):
    """compute() on torch, or None where torch raises."""
    try:
        return compute()
    except Exception:  # noqa: BLE001
        return None


def _inexact(x):
    """Whether a tensor may hold a rounded value: one off the inputs' grid of 1/8, or larger than 8 in magnitude
    (where a rounded float16 may fall on the grid). A comparison, a floor or a cast to an integer of such a value
    may fall either side of its jump in the two runs, whose kernels round the last ulp differently: those are drawn
    on exact values only."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return False
    x = x.detach().double()
    x = x[torch.isfinite(x)]
    return bool(((x * 8).round() != x * 8).any() or (x.abs() > 8).any())


def _either_inexact(a, b):
    return _inexact(a) or _inexact(b)


def _storage_offsets(x):
    """Which elements of its storage tensor x reads."""
    if x.ndim == 0:
        return {x.storage_offset()}
    grid = np.indices(tuple(x.shape)).reshape(x.ndim, -1)
    return set((x.storage_offset() + np.asarray(x.stride()) @ grid).tolist())


def _dense(x):
    """torch's is_non_overlapping_and_dense: contiguous in some order of the dimensions of length 2 or more."""
    expected = 1
    for stride, n in sorted((stride, n) for n, stride in zip(x.shape, x.stride()) if n > 1):
        if stride != expected:
            return False
        expected *= n
    return True


def _order_dependent(out, src):
    """left out: torch's own undefined behaviour. An in-place change whose operand shares elements with the
    written-to tensor, laid out otherwise, where one of the two is not dense: torch refuses only where both are
    (RuntimeError: unsupported operation: some elements of the input tensor and the written-to tensor refer to a
    single memory location), and elsewhere computes in the order its loops take, reading elements it has written
    already (b = a[..., ::2]; b.add_(b[0]) adds the new b[0] to b[1]); the package reads them all first."""
    return (isinstance(src, torch.Tensor) and src.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
            and (src.data_ptr(), tuple(src.shape), src.stride()) != (out.data_ptr(), tuple(out.shape), out.stride())
            and not (_dense(out) and _dense(src)) and bool(_storage_offsets(out) & _storage_offsets(src)))


def _setitem_excluded(index):
    def unless(a, b):
        slot = _result(lambda: a[index])  # (a 0-d b fills a slot of another shape: read once, first)
        # left out: torch's own failure: a 0-d b that requires grad filling a slot of another shape in an integer
        # or bool a makes a require grad (CopySlices), and backward fails (RuntimeError: isDifferentiableType(...)
        # INTERNAL ASSERT FAILED); elsewhere torch writes the values and a requires no grad, as the package does
        fills_integers = (slot is not None and isinstance(b, torch.Tensor) and b.ndim == 0 and slot.ndim > 0
                          and b.requires_grad and not a.is_floating_point())
        return fills_integers or (slot is not None and isinstance(b, torch.Tensor)
                                  and (b.ndim or slot.shape == b.shape) and _order_dependent(slot, b))
    return unless




def _pow_excluded(base, exponent):
    # left out: a Python bool base with an exponent that requires grad, and a bool exponent (a tensor or a number)
    # with a base that requires grad, where torch's own backward fails (RuntimeError: false INTERNAL ASSERT FAILED
    # at "c10/core/Scalar.cpp", unknown ivalue tag 4; Subtraction, the `-` operator, with a bool tensor is not
    # supported, as its formula computes exponent - 1) or gives x ** False a NaN gradient at 0, where x ** 0 has 0
    torchs_own_failure = ((isinstance(base, bool) and _tensor(exponent) and exponent.requires_grad)
                          or ((_tensor(exponent, "b") or isinstance(exponent, bool))
                              and _tensor(base) and base.requires_grad))
    # left out: the special values -inf and -0.0 under the exponents 0.5 and -0.5, which torch computes as sqrt and
    # rsqrt in float32 and float64 (-inf ** -0.5 is NaN, -0.0 ** -0.5 is -inf) and as pow in float16 (-inf ** 0.5 is
    # inf), and the package as pow (0.0 and inf) and sqrt (NaN) the other way round: IEEE 754's special cases
    special = (isinstance(exponent, float) and abs(exponent) == 0.5 and _tensor(base, "f")
               and bool(((base == -math.inf) | ((base == 0) & base.signbit())).any()))
    return torchs_own_failure or special


def _zeros_of_both_signs(a, b):
    """The sign of a zero: maximum(a, b) of zeros of both signs is a's zero in torch and b's in the package (minimum
    too), and relu(-0.0) is -0.0 in torch, 0.0 here. Only a division by the zero (an infinity of the other sign)
    tells them apart, and IEEE 754 leaves the choice open: left out, as a last-bit difference of two libraries."""
    if not (isinstance(a, torch.Tensor) and a.is_floating_point()):
        return False
    if b is None:  # relu: a negative zero of a's own
        return bool(((a == 0) & a.signbit()).any())
    a, b = torch.broadcast_tensors(a.detach(), torch.as_tensor(b, dtype=a.dtype).detach())
    return bool(((a == 0) & (b == 0) & (a.signbit() != b.signbit())).any())


def _zero_remainder(a, b):
    """The sign of a zero: 1.0 % -1.0 is 0.0 in torch (a - b * floor(a / b)) and -0.0 in the package (NumPy's, and
    Python's): left out with the signs of zeros above."""
    result = torch.remainder(a, b)
    return result.is_floating_point() and bool((result == 0).any())


def _changeable(x):
    """Whether torch lets x change in place: not a leaf that requires grad, nor a view of one."""
    base = x if x._base is None else x._base
    return not (base.is_leaf and base.requires_grad)


def _large(a, b):
    """sin and cos of a rounded argument larger than 8 are left out: the argument's ulp is its magnitude times the
    dtype's epsilon, and the sine moves by as much (exp(exp(3)) is 5.3e8 in float32, whose ulp is 64)."""
    return _inexact(a) and bool((a.detach().abs() > 8).any())


# Element-wise operations and reductions of one tensor, PyTorch's spellings: functions and methods.
UNARY = (
    Op("{t} = fw.exp({a})"), Op("{t} = {a}.sin()", unless=_large), Op("{t} = fw.cos({a})", unless=_large),
    Op("{t} = fw.tanh({a})"), Op("{t} = fw.sigmoid({a})"),
    Op("{t} = fw.relu({a})", unless=lambda a, b: _zeros_of_both_signs(a, None)),
    Op("{t} = fw.sqrt({a})"), Op("{t} = {a}.log()"), Op("{t} = {a}.abs()"),
    Op("{t} = {a}.square()"),
    Op("{t} = -{a}"),
    Op("{t} = {a} ** 2"), Op("{t} = {a} ** 0.5", unless=lambda a, b: _pow_excluded(a, 0.5)),
    Op("{t} = fw.clamp({a}, -1.0, 1.0)"),
    Op("{t} = {a}.clamp(min=0.5)"),
    Op("{t} = {a}.sum()"), Op("{t} = {a}.sum(0)"), Op("{t} = {a}.mean()"), Op("{t} = {a}.mean(-1, keepdim=True)"),
    Op("{t} = {a}.amax(-1)"), Op("{t} = {a}.max()"),
    Op("{t} = fw.logsumexp({a}, -1)"),
    Op("{t} = fw.softmax({a}, -1)"),
    Op("{t} = {a}.float()"), Op("{t} = {a}.double()"), Op("{t} = {a}.half()"), Op("{t} = {a}.clone()"),
    Op("{t} = {a}.long()", unless=_either_inexact), Op("{t} = {a}.int()", unless=_either_inexact),
    Op("{t} = {a}.bool()", unless=_either_inexact), Op("{t} = {a}.to(fw.float64)"),
    Op("{t} = {a}.sum(dtype=fw.float64)"),
)
# Operations of two operands: the operators take a Python number on either side, the functions tensors.
BINARY_OPERATORS = (
    Op("{t} = {a} + {b}"), Op("{t} = {b} + {a}"), Op("{t} = {a} * {b}"), Op("{t} = {b} * {a}"),
    Op("{t} = {a} - {b}"), Op("{t} = {b} - {a}"),
    Op("{t} = {a} / {b}"), Op("{t} = {b} / {a}"),
    Op("{t} = {a} ** {b}", unless=_pow_excluded), Op("{t} = {b} ** {a}", unless=lambda a, b: _pow_excluded(b, a)),
    Op("{t} = {a} % {b}", unless=lambda a, b: _either_inexact(a, b) or _zero_remainder(a, b)),
    Op("{t} = {a} // {b}", unless=_either_inexact),
    Op("{t} = {a} < {b}", unless=_either_inexact), Op("{t} = {a} == {b}", unless=_either_inexact),
    Op("{t} = fw.where({a} > 0, {a}, {b})", unless=lambda a, b: _inexact(a)),
)
BINARY_FUNCTIONS = (
    Op("{t} = fw.maximum({a}, {b})", unless=_zeros_of_both_signs),
    Op("{t} = fw.minimum({a}, {b})", unless=_zeros_of_both_signs),
    Op("{t} = fw.mul({a}, {b})"),
    Op("{t} = {a} @ {b}"),
)
VIEWS = (
    Op("{t} = {a}.reshape(-1)"), Op("{t} = {a}.view(-1)"), Op("{t} = {a}.flatten()"), Op("{t} = {a}.detach()"),
    Op("{t} = {a}.t()"), Op("{t} = {a}.transpose(0, -1)"), Op("{t} = {a}.squeeze()"),
    Op("{t} = {a}[0]"), Op("{t} = {a}[..., 1:]"), Op("{t} = {a}[..., ::2]"),
    Op("{t} = {a}.unsqueeze(0)"), Op("{t} = {a}.expand(2, 3)"), Op("{t} = {a}.expand({a}.shape)"),
)
IN_PLACE = (
    Op("{a}.add_({b})", unless=_order_dependent),
    Op("{a}.sub_({b})", unless=_order_dependent),
    Op("{a}.mul_({b})", unless=_order_dependent), Op("{a}.div_({b})", unless=_order_dependent),
    Op("{a} += {b}", unless=_order_dependent), Op("{a} *= {b}", unless=_order_dependent),
    Op("{a}[0] = {b}", unless=_setitem_excluded(0)),
    Op("{a}[..., -1] = {b}", unless=_setitem_excluded((Ellipsis, -1))),
    Op("{a}.copy_({b})", unless=_order_dependent), Op("{a}.zero_()"),
)
HOOKS = (
    Op("{a}.register_hook(lambda g: None)"),
    Op("{a}.register_hook(lambda g: g * 2)"),
    Op("{a}.register_hook(lambda g: g * 0.5 + 1)"),
    Op("{a}.register_hook(lambda g: g.double())"),  # another dtype: both must refuse (unless it is float64 already)
    Op("{a}.register_hook(lambda g: g.float())"),
    Op("{a}.register_hook(lambda g: g.sum())"),  # another shape: both must refuse (unless 0-d already)
    Op("{a}.register_hook(lambda g: g[..., :1])"),
    Op("{a}.retain_grad()"),
)
DEEPCOPY = (Op("{t} = copy.deepcopy({a})"),)
KINDS = {"unary": (UNARY, None), "operator": (BINARY_OPERATORS, "operand"), "function": (BINARY_FUNCTIONS, "tensor"),
         "view": (VIEWS, None), "in place": (IN_PLACE, "operand"), "hook": (HOOKS, None), "deepcopy": (DEEPCOPY, None)}


class Drawer:
    """Draws a program line by line, running each line on torch as it is drawn: later lines pick their operands
    among the names torch has bound (a line that raised binds nothing), and an Op's exclusions are asked about
    torch's values of its operands."""

    def __init__(self, draw):
        self.draw = draw
        self.lines, self.count = [], 0
        self.tensors, self.numbers, self.grad_leaves = [], [], []
        self.namespace = {"fw": torch, "copy": copy}

    def add(self, code, binds=None, uses=()):
        self.lines.append(Line(code, binds, tuple(uses)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(_compiled(code), self.namespace)  # noqa: S102 (the drawn program, on torch)
            except Exception:  # noqa: BLE001 (a line that raises stays in the program; it binds nothing)
                return False
            finally:
                ask_grad_fns(self.namespace)
        return True

    def new_name(self):
        self.count += 1
        return f"n{self.count - 1}"

    def leaf(self, kinds=("dim", "zero", "number"), dtypes=LEAF_DTYPES, requires_grad=None):
        draw, name = self.draw, self.new_name()
        kind, dtype = draw(st.sampled_from(kinds)), draw(st.sampled_from(dtypes))
        if kind == "number":
            self.add(f"{name} = {_element(draw, dtype)!r}", name)
            self.numbers.append(name)
            return
        shape = draw(st.sampled_from(SHAPES)) if kind == "dim" else ()
        # floating leaves require grad two times in three; an integer or bool one now and then, which both refuse
        if requires_grad is None:
            requires_grad = draw(st.integers(0, 2)) < 2 if dtype in FLOATING else draw(st.integers(0, 7)) == 7
        if self.add(f"{name} = fw.tensor({_nested(draw, dtype, shape)!r}, dtype=fw.{dtype}, "
                    f"requires_grad={requires_grad})", name):
            self.tensors.append(name)
            if requires_grad:
                self.grad_leaves.append(name)

    def pick(self, names, prefer=None):
        """One of names; three times in four one whose torch value satisfies prefer, if any does."""
        if prefer is not None and self.draw(st.integers(0, 3)) > 0:
            names = [name for name in names if prefer(self.namespace[name])] or names
        return names[self.draw(st.integers(0, 99)) % len(names)]

    def step(self, kind):
        ops, second = KINDS[kind]
        # an in-place change of a leaf that requires grad (or of a view of one) raises in both: now and then
        a = self.pick(self.tensors, prefer=_changeable if kind == "in place" else None)
        b = None if second is None else self.pick(self.tensors if second == "tensor" else self.tensors + self.numbers)
        value = self.namespace.get
        candidates = [op for op in ops if "{b}" not in op.template or b is not None
                      if op.drawn_for(value(a), None if b is None else value(b))]
        if not candidates:
            return
        op = self.draw(st.sampled_from(candidates))
        b = b if "{b}" in op.template else None
        t = self.new_name() if "{t}" in op.template else None
        if self.add(op.template.format(t=t, a=a, b=b), t, [name for name in (a, b) if name is not None]):
            if t and _is_tensor(self.namespace[t]):
                self.tensors.append(t)

    def backward(self):
        """A weighted sum of one tensor (weights -1.5, -0.5, 0.5, ...: a backward that forgets to multiply by its
        incoming gradient shows), then backward passes, or autograd.grad of the leaves that require grad."""
        draw = self.draw
        target = self.pick(self.tensors, prefer=lambda x: x.requires_grad)
        self.add(f"loss = ({target} * (fw.arange({target}.numel()) % 3 - 1.5).reshape({target}.shape)).sum()",
                 "loss", [target])
        if self.grad_leaves and draw(st.booleans()):
            self.add(f"grads = fw.autograd.grad(loss, [{', '.join(self.grad_leaves)}], allow_unused=True)", "grads",
                     ["loss", *self.grad_leaves])
            return
        for code in draw(st.sampled_from(BACKWARD)):
            self.add(code, None, ["loss"])

    def program(self):
        return Program(self.lines)


BACKWARD = (
    ["loss.backward()"],
    ["loss.backward(retain_graph=True)", "loss.backward()"],  # the gradients add up
    ["loss.backward()", "loss.backward()"],  # a second pass through freed saved tensors raises, if any were saved
)


@st.composite
def programs(draw, kinds, n_leaves=(1, 3), n_steps=(1, 6)):
    drawer = Drawer(draw)
    drawer.leaf(kinds=("dim", "zero"), dtypes=FLOATING, requires_grad=True)  # something to differentiate
    for _ in range(draw(st.integers(n_leaves[0] - 1, n_leaves[1] - 1))):
        drawer.leaf()
    for _ in range(draw(st.integers(*n_steps))):
        drawer.step(draw(st.sampled_from(kinds)))
    drawer.backward()
    return drawer.program()


# ----- modules and their state dicts ----------------------------------------------------------------------------------

# Each module with its parameters' shapes: their values are set under no_grad (the two frameworks initialise them from
# different generators), and state_dict's keys must be the same.
MODULES = {
    "fw.nn.Linear(3, 2{dtype})": {"weight": (2, 3), "bias": (2,)},
    "fw.nn.Linear(3, 2, bias=False{dtype})": {"weight": (2, 3)},
    "fw.nn.LayerNorm(3{dtype})": {"weight": (3,), "bias": (3,)},
}
# What a program does to a module after a forward pass: through its state dict's values (detached, sharing memory
# and version counters with the parameters), load_state_dict (a copy in place, under no_grad), zero_grad, a hook on
# a parameter and a deep copy (which leaves the hook behind).
STATE_EDITS = (
    "sd['weight'].add_(0.5)", "sd['weight'].mul_(sd['weight'])", "sd['weight'][0] = 1.5", "sd['weight'].zero_()",
    "sd['weight'].copy_(fw.ones_like(sd['weight']))", "sd[list(sd)[-1]].sub_(0.25)",
    "m.load_state_dict(sd)", "m.load_state_dict({k: v * 2 for k, v in sd.items()})",
    "m.load_state_dict({k: v.double() for k, v in sd.items()})",
    "m.load_state_dict({k: v.half() for k, v in sd.items()})",
    "m.load_state_dict({'weight': sd['weight']}, strict=False)", "m.load_state_dict({'weight': sd['weight']})",
    "m.zero_grad(set_to_none=False)", "m.zero_grad()", "sd = m.state_dict()",
    "m.weight.register_hook(lambda g: g * 10)", "m2 = copy.deepcopy(m)", "m.weight.requires_grad_(False)",
)
# A cast of the module comes before its forward pass. After it, torch keeps the forward's dtype in the graph: a
# float64 weight gets a float16 gradient (Linear), or backward raises (LayerNorm: expected scalar type Half but found
# Double); that is no contract of torch's to hold the package to, and is left out.
CASTS = {"m.float()": "float32", "m.double()": "float64", "m.half()": "float16", "m.to(fw.float64)": "float64"}
AFTER_BACKWARD = (
    "g = m.weight.grad", "m.zero_grad(set_to_none=False)", "m.zero_grad()", "y2 = m(x)",
    "(y2 * 1.5).sum().backward()", "m2(x).sum().backward()", "sd2 = m.state_dict()",
    "m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})",
)


@st.composite
def module_programs(draw):
    """A module with set parameters, a forward pass, edits of its state, backward, and what comes after it."""
    drawer = Drawer(draw)
    module, shapes = draw(st.sampled_from(sorted(MODULES.items())))
    dtypes_ = ("", "float32", "float64", "float16")
    dtype = draw(st.sampled_from(dtypes_))  # "": the default dtype, float32
    drawer.add("m = " + module.format(dtype=dtype and f", dtype=fw.{dtype}"), "m")
    for name, shape in shapes.items():
        drawer.add(f"with fw.no_grad():\n    m.{name}.copy_(fw.tensor({_nested(draw, 'float64', shape)!r}))", None,
                   ["m"])
        drawer.add(f"w_{name} = m.{name}", f"w_{name}", ["m"])
    dtype = dtype or "float32"
    if draw(st.booleans()):
        cast = draw(st.sampled_from(sorted(CASTS)))
        if CASTS[cast] in dtypes_:
            drawer.add(cast, None, ["m"])
            dtype = CASTS[cast]
    in_dtype = draw(st.sampled_from((dtype, dtype, "float32", "float64", "float16")))
    in_shape = draw(st.sampled_from(((2, 3), (3,))))
    drawer.add(f"x = fw.tensor({_nested(draw, in_dtype, in_shape)!r}, dtype=fw.{in_dtype}, "
               f"requires_grad={draw(st.booleans())})", "x")
    drawer.add("y = m(x)", "y", ["m", "x"])
    drawer.add("sd = m.state_dict()", "sd", ["m"])
    # and a cast to the dtype the module has already, which leaves its parameters' memory (and sd's) as it is
    own_casts = tuple(cast for cast, to in CASTS.items() if to == dtype) + ("m.to(m.weight.dtype)",)
    for _ in range(draw(st.integers(0, 3))):
        code = draw(st.sampled_from(STATE_EDITS + own_casts))
        binds = code.split(" = ")[0] if code.startswith(("sd =", "m2 =")) else None
        drawer.add(code, binds, ["m", "sd"])
    drawer.add("loss = (y * (fw.arange(y.numel()) % 3 - 1.5).reshape(y.shape)).sum()", "loss", ["y"])
    drawer.add("loss.backward()", None, ["loss"])
    after = draw(st.lists(st.sampled_from(AFTER_BACKWARD), max_size=4, unique=True))
    for code in sorted(after, key=AFTER_BACKWARD.index):
        if code.startswith("m2(") and "m2" not in drawer.namespace:
            continue
        binds = code.split(" = ")[0] if code.startswith(("g =", "y2 =", "sd2 =")) else None
        uses = [name for name in ("m", "m2", "x", "y2") if name in code]
        drawer.add(code, binds, uses)
    return drawer.program()


# ----- nested transforms: forward over reverse ------------------------------------------------------------------------

# Functions of a vector x, smooth to the third derivative, each with a constant of a drawn dtype and rank (a 0-d
# float64 constant leaves a float32 x's result float32; a float64 vector makes it float64).
PIECES = ("fw.sin({x})", "fw.exp({x} * 0.5)", "fw.tanh({x})", "fw.sigmoid({x})", "{x} * {x}", "{x} ** 3",
          "fw.log({x} * {x} + 1)", "{x} * {c}", "{x} + {c}", "fw.cos({x}) * {c}", "fw.softmax({x}, -1)")
CONSTANTS = ("1.5", "fw.tensor(0.5, dtype=fw.float64)", "fw.tensor([0.5, -1.0, 2.0], dtype=fw.float64)",
             "fw.tensor([0.5, -1.0, 2.0], dtype=fw.float32)", "fw.tensor(2.0, dtype=fw.float16)")
# Each transform, and whether it is drawn for an x that requires grad (torch's results are then differentiable).
# excluded (book/pytorch_users.md, "What is not there": a tangent is never itself differentiated): a tangent, and what
# jacfwd and hessian build of tangents, requires no grad in the package, where torch's is differentiable when x
# requires grad, or when the function computes a gradient with create_graph (the forward_ad case below)
TRANSFORMS = {
    # forward over reverse, PyTorch's forward_ad: the gradient's tangent is the Hessian times v (detached: see above).
    # (Not fw.func.jvp of a function calling fw.autograd.grad: torch.func refuses it, RuntimeError: element 0 of
    # tensors does not require grad, where the package computes the value; left out until decided.)
    "with fw.autograd.forward_ad.dual_level():\n"
    "    xd = fw.autograd.forward_ad.make_dual(x.detach().requires_grad_(), v)\n"
    "    gradient = fw.autograd.grad(f(xd), xd, create_graph=True)[0]\n"
    "    hv = tuple(part.detach() for part in fw.autograd.forward_ad.unpack_dual(gradient))": True,
    "h = fw.func.hessian(f)(x)": False,
    "h = fw.func.jacfwd(fw.func.jacrev(f))(x)": False,
    "out = fw.func.jvp(fw.func.jacrev(f), (x,), (v,))": False,
    "h = fw.func.jacrev(fw.func.jacrev(f))(x)": True,
    "j = fw.func.jacfwd(g)(x)": False,
    "j = fw.func.jacrev(g)(x)": True,
    "out = fw.func.jvp(g, (x,), (v,))": False,
    "out = fw.func.vjp(g, x)[1](fw.ones_like(g(x)))": True,
}
@st.composite
def nested_programs(draw):
    drawer = Drawer(draw)
    dtype = draw(st.sampled_from(("float64", "float32")))
    requires_grad = draw(st.integers(0, 2)) == 2
    drawer.add(f"x = fw.tensor({_nested(draw, 'float64', (3,))!r}, dtype=fw.{dtype}, "
               f"requires_grad={requires_grad})", "x")
    drawer.add(f"v = fw.tensor({_nested(draw, 'float64', (3,))!r}, dtype=fw.{dtype})", "v")
    body = "x"
    for _ in range(draw(st.integers(1, 3))):
        body = draw(st.sampled_from(PIECES)).format(x=f"({body})" if " " in body else body,
                                                   c=draw(st.sampled_from(CONSTANTS)))
    drawer.add(f"g = lambda x: {body}", "g")
    drawer.add("f = lambda x: g(x).sum()", "f")
    transforms = [code for code, with_grad in TRANSFORMS.items() if with_grad or not requires_grad]
    for code in draw(st.lists(st.sampled_from(transforms), min_size=1, max_size=3, unique=True)):
        drawer.add(code, code.split(" = ")[0] if not code.startswith("with") else "hv", ["x", "v", "f", "g"])
    return drawer.program()


# ----- the tests ------------------------------------------------------------------------------------------------------

OPERATIONS = ("unary", "operator", "function")
VIEWS_AND_IN_PLACE = ("unary", "operator", "function", "view", "view", "in place", "in place")
WITH_HOOKS = ("unary", "operator", "view", "in place", "hook", "hook", "deepcopy")


def examples(count):
    """count programs in the default profile (60 examples a test), as many more as the profile draws: `make fuzz`'s
    five times as many. Programs run in a few milliseconds: the file runs in about 30 seconds on one core."""
    return count * settings.default.max_examples // 60


@settings(max_examples=examples(1500))
@given(programs(kinds=OPERATIONS))
def test_programs_of_operations_over_dtypes_and_operand_kinds(program):
    assert_same_runs(program)


@settings(max_examples=examples(2000))
@given(programs(kinds=VIEWS_AND_IN_PLACE, n_steps=(2, 8)))
def test_programs_of_views_and_in_place_changes(program):
    assert_same_runs(program)


@settings(max_examples=examples(1000))
@given(programs(kinds=WITH_HOOKS, n_steps=(2, 7)))
def test_programs_with_hooks(program):
    assert_same_runs(program)


@settings(max_examples=examples(500))
@given(module_programs())
def test_programs_of_modules_and_their_state_dicts(program):
    assert_same_runs(program)


@settings(max_examples=examples(400))
@given(nested_programs())
def test_nested_transforms(program):
    assert_same_runs(program)


# ----- the comparison catches what it is there to catch ---------------------------------------------------------------

def program(*codes):
    """A Program of fixed lines; a line `name = ...` binds name."""
    return Program(Line(code, re.match(r"(\w+) = ", code)[1] if re.match(r"\w+ = ", code) else None)
                   for code in codes)


def _scaled(method, factor):
    def scaled(self, *args):
        return method(self, *args) * factor
    return scaled


def _copying_detach(self):
    return tp.Variable(self.data.copy(), requires_grad=False)


def _refusing_with_a_type_error(a, b):
    if a != b:
        raise TypeError("planted: a TypeError where torch raises RuntimeError")


# (what is planted, how, a program it must be caught on)
PLANTED = {
    "a value off by 1e-8 in float64": (
        lambda patch: patch.setattr(tp.functions.Exp, "forward", _scaled(tp.functions.Exp.forward, 1 + 1e-8)),
        program("x = fw.tensor([0.5, -1.0, 2.0], dtype=fw.float64)", "y = fw.exp(x)")),
    "a float32 gradient off by 1%": (
        lambda patch: patch.setattr(tp.functions.Sin, "backward", _scaled(tp.functions.Sin.backward, 1.01)),
        program("x = fw.tensor([0.5, -1.0, 2.0], requires_grad=True)", "y = x.sin()", "y.sum().backward()")),
    "a dtype": (
        lambda patch: patch.setattr(tp.dtypes, "result_type", lambda *operands: np.dtype(np.float64)),
        program("x = fw.tensor([1, 2])", "y = x * 0.5")),
    "a detach that copies": (
        lambda patch: patch.setattr(tp.Variable, "detach", _copying_detach),
        program("x = fw.tensor([1.0, 2.0])", "y = x.detach()", "x.add_(1)")),
    "an exception of another type": (
        lambda patch: patch.setattr(tp.dtypes, "check_same_dtype", _refusing_with_a_type_error),
        program("x = fw.ones(2, 2)", "y = x @ fw.ones(2, 2, dtype=fw.float64)")),
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_the_comparison_catches_a_planted_difference(planted, monkeypatch):
    plant, program_ = PLANTED[planted]
    assert_same_runs(program_)  # the program passes as the package stands ...
    plant(monkeypatch)
    with pytest.raises(AssertionError):  # ... and fails with the difference planted
        assert_same_runs(program_)
