"""The page for PyTorch users (book/pytorch_users.md) held against torch and the package, row by row: a name the
page maps must exist in both, a parameter it lists must be a parameter of both, an operator it shows must give
what torch gives, what it says is not there must not be there (or must refuse), and its step links must lead to
notebooks. The page has drifted both ways before; this file is what keeps it from drifting again.

How a row of the name map is read (a new row that keeps to these rules needs no edit here; a span no rule places
fails, naming itself):

- First column, each backticked span:
  - a name: with a prefix of PREFIXES (`torch.`, `nn.`, `F.`, `optim.`, `Tensor.`, `x.` a tensor, `module.`/`model.`,
    `opt.`, `scheduler.`, `handle.`, `ctx.`), or bare and placed: after "`A`: " it belongs to A (a member of a module
    or a class, a parameter of a function) until a ";"; else in the table's CONTEXTS; else beside the name before
    it (`torch.zeros`, `ones`; `module.to(device)`, `.cuda()`). `@` before it: a decorator, run as one.
  - parentheses after a name list parameters by torch's names: each must be a parameter of torch's callable and of
    the package's (inspect.signature, a class's constructor; torch's C functions by their .pyi stubs; `...` stands
    for the others, `*args` for a variable number). A positional literal (`torch.device("cuda:0")`) or arguments
    that are all operands (`len(x)`, `module(x)`) make the span an expression.
  - an expression (`x + y`, `x[i] = v`, an operator alone meaning `x OP y`): run on both frameworks with
    namespace()'s operands; torch must run it, and the package must give the same values, shapes and dtypes.
  - `name=` alone: a parameter of the name before it. `x`, `y`, `c`, ... alone: placeholders of the prose.
  - SPELLED_OUT: a snippet, run on both, for a span that no rule can check.
  - "(none: ...)": PyTorch has no such name; only the second column is checked.
- Second column: "same" (possibly after "`place`: ") keeps every name at its place; otherwise a name goes where the
  column names a package name with the same last part, else (a name beside or inside one that moved) with it, else
  stays (RENAMED spells out the rest). Its package names (`tinypytorch.`, `tp.`, `x.`, `Layer.`, `nn.`, `F.`, and bare
  spans listed right after one) must resolve in the package, with the parameters they list.
- Third column: "no step" or one link to an existing step.

"What is not there": NOT_THERE says, for each backticked span, what the bullet claims of it (Absent, Refused,
Present); a name with a prefix of PREFIXES needs no entry and must be absent from the package; an exception's name
only says how its neighbour refuses. A name the package has, or code it runs, fails with the advice to move it to a
table.
"""
import ast
import builtins
import contextlib
import copy
import functools
import inspect
import io
import pathlib
import re
import typing
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad  # the submodules the page names, as attributes of torch
import torch.autograd.functional
import torch.distributed.optim  # ZeroRedundancyOptimizer
import torch.func
import torch.nn.modules.module
import torch.utils.checkpoint
import torch.utils.benchmark
import torch.utils.data

import tinypytorch
import tinypytorch.utils.benchmark
import tinypytorch.functions

pytestmark = pytest.mark.torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "pytorch_users.md"
TEXT = PAGE.read_text()

# ----- where a name lives ---------------------------------------------------------------------------------------------
# A place is a root object (a framework, or a sample tensor, module, optimizer, ... made by samples()) and a path of
# attributes below it. The same place is looked up in torch and in the package.

@dataclass(frozen=True)
class Place:
    root: str
    attrs: tuple

    def child(self, *names):
        return Place(self.root, self.attrs + tuple(names))

    def sibling(self, *names):
        return Place(self.root, self.attrs[:-1] + tuple(names))

    def spelled(self, package):
        head = ("tinypytorch" if package else "torch") if self.root == "torch" else self.root
        return ".".join((head,) + self.attrs)


PREFIXES = {  # a prefix the page writes: the place it stands for, in either framework
    "torch": Place("torch", ()),
    "nn": Place("torch", ("nn",)),
    "F": Place("torch", ("nn", "functional")),
    "optim": Place("torch", ("optim",)),
    "Tensor": Place("torch", ("Tensor",)),
    "x": Place("x", ()),  # a tensor
    "module": Place("module", ()),
    "model": Place("module", ()),
    "opt": Place("opt", ()),  # an optimizer
    "scheduler": Place("scheduler", ()),
    "handle": Place("handle", ()),  # what register_hook returns
    "ctx": Place("ctx", ()),  # a custom Function's ctx, inside forward
}
# the second column's names are the package's: it may spell `tinypytorch.` or `tp.`, and name a Layer's members
PACKAGE_PREFIXES = {
    "tinypytorch": Place("torch", ()), "tp": Place("torch", ()), "Layer": Place("torch", ("layers", "Layer")),
    "x": PREFIXES["x"], "nn": PREFIXES["nn"], "F": PREFIXES["F"],
}
CONTEXTS = {  # the place of a bare name in these tables
    "Modules": Place("module", ()),
    "Data": Place("torch", ("utils", "data")),
    "Memory tools": Place("torch", ("utils", "checkpoint")),
}
RENAMED = {  # a PyTorch name the package spells differently, where the second column cannot show which is which
    "x.sum_to_size": Place("torch", ("sum_to",)),
    "torch.distributed.optim.ZeroRedundancyOptimizer": Place("torch", ("distributed", "zero", "ZeroDataParallel")),
}
# the prose's names for the operands of an expression; alone in a span, they only say what an operand is
PLACEHOLDERS = {"x", "y", "c", "a", "w", "i", "v", "model", "module"}

@functools.cache
def samples(fw):
    """The root objects of PREFIXES in framework fw (torch or tinypytorch), made once."""
    leaf = fw.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    contexts = []

    class Twice(fw.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            contexts.append(ctx)
            return t * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    Twice.apply(leaf)
    opt = fw.optim.SGD([fw.nn.Parameter(fw.ones(2))], lr=0.1)
    return {
        "torch": fw, "x": leaf * 1,  # not a leaf, so that x.grad_fn is a node
        "module": fw.nn.Module(), "opt": opt, "scheduler": fw.optim.lr_scheduler.StepLR(opt, step_size=1),
        "handle": leaf.register_hook(lambda grad: grad), "ctx": contexts[0],
    }


def lookup(place, fw):
    """The object at place in fw; AttributeError names the first part that is missing."""
    obj = samples(fw)[place.root]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when .grad of a non-leaf is read
        for i, name in enumerate(place.attrs):
            if not hasattr(obj, name):
                raise AttributeError(f"{Place(place.root, place.attrs[:i + 1]).spelled(fw is tinypytorch)} "
                                     f"does not exist")
            obj = getattr(obj, name)
    return obj


def resolves(place, fw):
    try:
        lookup(place, fw)
        return True
    except AttributeError:
        return False


# ----- parameters -----------------------------------------------------------------------------------------------------
# torch's functions written in C have no inspect.signature; their stubs (.pyi, shipped with torch) hold the keyword
# names torch's argument parser accepts (`x.where(condition, other)`, where the docstring says `y`).

def _stub_parameters(path, class_name=None):
    tree = ast.parse(pathlib.Path(path).read_text())
    body = tree.body
    if class_name:
        body = next(node.body for node in body if isinstance(node, ast.ClassDef) and node.name == class_name)
    table = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            names = table.setdefault(node.name, set())
            names.update(a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs)
            names.update("*" + a.arg for a in [node.args.vararg] if a)
            names.update("**" + a.arg for a in [node.args.kwarg] if a)
            names.discard("self")
    return table


_C = pathlib.Path(torch._C.__file__).parent / "_C"
TORCH_FUNCTION_STUBS = _stub_parameters(_C / "_VariableFunctions.pyi") | _stub_parameters(_C / "_nn.pyi")
TORCH_TENSOR_STUBS = _stub_parameters(_C / "__init__.pyi", "TensorBase")


def parameter_names(obj, package):
    """The parameter names obj takes: plain names, `*name` for a variable-length one, `**name` for keywords."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        if package:
            raise
        is_method = isinstance(getattr(obj, "__self__", None), torch.Tensor) or \
            getattr(obj, "__objclass__", None) is torch._C.TensorBase
        stubs = TORCH_TENSOR_STUBS if is_method else TORCH_FUNCTION_STUBS
        if obj.__name__ not in stubs:
            raise ValueError(f"torch's {obj.__name__} has no signature and no stub")
        return stubs[obj.__name__]
    kinds = {p.kind for p in signature.parameters.values()}
    if not package and kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        return _torch_overloads(obj)
    if package and kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} and \
            isinstance(getattr(obj, "__self__", None), tinypytorch.Variable) and \
            hasattr(tinypytorch.functions, obj.__name__):
        # the package's x.m(*args, **kwargs) hands everything to tinypytorch.functions.m(x, ...) (tensor_methods)
        return parameter_names(getattr(tinypytorch.functions, obj.__name__), True) - {
            next(iter(inspect.signature(getattr(tinypytorch.functions, obj.__name__)).parameters))}
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return {prefix.get(p.kind, "") + p.name for p in signature.parameters.values()} - {"self"}


def _torch_overloads(obj):
    """The parameters of a torch callable that takes (*args, **kwargs) and dispatches: from its typing overloads
    (`module.to`), else from the signature lines its docstring opens with (F.max_pool2d's boolean dispatch)."""
    overloads = typing.get_overloads(obj)
    if overloads:
        return set().union(*(parameter_names(o, False) for o in overloads)) - {"self"}
    names = set()
    for arguments in re.findall(rf"^\s*{obj.__name__}\((.*)\)", obj.__doc__ or "", re.MULTILINE):
        names.update(a.split("=")[0].strip() for a in split_arguments(arguments) if a.strip() != "*")
    if not names:
        raise ValueError(f"torch's {obj.__name__} shows no parameters: no signature, overloads or docstring")
    return names


def parameter_missing(param, names):
    """Whether the page's parameter (`name`, `name=...`, `*args`) is missing from names; `...` never is."""
    if param == "...":
        return False
    if param.startswith("**"):
        return not any(n.startswith("**") for n in names)
    if param.startswith("*"):
        return not any(n.startswith("*") and not n.startswith("**") for n in names)
    return param.split("=")[0].strip() not in names


def split_arguments(text):
    """`a, b=(1, 2), ...` -> ["a", "b=(1, 2)", "..."]: commas at the top level only."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def is_literal(argument):
    try:
        ast.literal_eval(argument)
        return True
    except (ValueError, SyntaxError):
        return False


# ----- expressions on both frameworks ---------------------------------------------------------------------------------
OPERANDS = ([[1.0, 2.0], [3.0, 4.0]], 1.5)  # x is the first that torch accepts: float(x) needs one element


def namespace(fw, x_data):
    """The names an expression on the page may use, in framework fw: `import tinypytorch as torch` and the prose's
    operands."""
    x = fw.tensor(x_data)
    y = x * 0.5 + 0.25
    model = fw.nn.Linear(2, 2)
    model.load_state_dict({"weight": fw.tensor([[0.5, -1.0], [2.0, 0.25]]), "bias": fw.tensor([0.1, -0.2])})
    return {"torch": fw, "nn": fw.nn, "F": fw.nn.functional, "copy": copy, "np": np,
            "x": x, "y": y, "c": 2.0, "a": np.array([1.0, 2.0]), "w": fw.tensor([[1.0, 0.0], [2.0, 1.0]]),
            "i": 0, "v": 5.0, "model": model, "module": model}


def run_code(code, ns):
    """The value of an expression, or, for statements, of `result` if they set it, else of x (changed in place)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expression = compile(code, "<page>", "eval")
        except SyntaxError:  # statements
            exec(compile(code, "<page>", "exec"), ns)  # noqa: S102 (the page's code, on one framework)
            return ns.get("result", ns["x"])
        return eval(expression, ns)


def observe(value):
    """What is compared of a result: a tensor's shape, dtype and values; a sequence's items; a number's type and
    value; a string; another object's type name and str."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), value.detach().numpy())
    if isinstance(value, tinypytorch.Variable):
        return ("tensor", tuple(value.shape), str(value.dtype), np.asarray(value.data))
    if isinstance(value, (tuple, list)):
        return ("sequence", [observe(item) for item in value])
    if isinstance(value, (bool, int, float, str, type(None))):
        return (type(value).__name__, value)
    return ("object", type(value).__name__, str(value))


def same_observation(ours, theirs):
    if ours[0] != theirs[0]:
        return False
    if ours[0] == "tensor":
        return ours[1:3] == theirs[1:3] and np.allclose(ours[3], theirs[3], rtol=1e-6, atol=0, equal_nan=True)
    if ours[0] == "sequence":
        return len(ours[1]) == len(theirs[1]) and all(map(same_observation, ours[1], theirs[1]))
    return ours == theirs


def compare_on_both(code):
    """None if code runs on torch and gives the same in the package; else what differs."""
    for x_data in OPERANDS:
        try:
            theirs = observe(run_code(code, namespace(torch, x_data)))
            break
        except Exception as error:  # noqa: BLE001 (any refusal: torch is asked whether it runs the code at all)
            torch_error = error
    else:
        return f"torch refuses it ({type(torch_error).__name__}: {torch_error})"
    try:
        ours = observe(run_code(code, namespace(tinypytorch, x_data)))
    except Exception as error:  # noqa: BLE001
        return f"the package raises {type(error).__name__}: {error}"
    if not same_observation(ours, theirs):
        return f"the package gives {ours!r}, torch {theirs!r}"
    return None


# ----- reading the page -----------------------------------------------------------------------------------------------
SPAN = re.compile(r"\{doc\}`[^`]*`|`([^`]+)`")  # a {doc} link is passed over, not read as a span
DOC_LINK = re.compile(r"\{doc\}`([^`<]*)<notebooks/(step\d+)>`")
NAME = re.compile(r"^(@)?(\.)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\((.*)\))?$")
KWARG = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
OPERATOR = re.compile(r"^(?:[-+*/%@<>=!]{1,3})$")
SAME = re.compile(r"^(?:`[^`]+`:\s*)?same\b")


def spans(cell):
    """The backticked spans of a cell (not the {doc} links), each with the text between it and the span before."""
    out, end = [], 0
    for match in SPAN.finditer(cell):
        if match.group(1) is not None:
            out.append((match.group(1), cell[end:match.start()]))
            end = match.end()
    return out


@dataclass
class Row:
    table: str
    line: int
    cells: list

    @property
    def label(self):
        return f"book/pytorch_users.md:{self.line} ({self.table}) | {self.cells[0]} |"

    def __str__(self):
        return self.cells[0][:60]


def split_cells(line):
    """The cells of a table line: `|` outside backticks separates them."""
    cells, current, in_code = [], "", False
    for ch in line.strip()[1:-1]:
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += ch
    cells.append(current.strip())
    return cells


def table_rows():
    name_map = TEXT.split("## The name map")[1].split("## Deliberate differences")[0]
    offset = TEXT[:TEXT.index("## The name map")].count("\n")
    rows, table = [], None
    for number, line in enumerate(name_map.splitlines(), start=offset + 1):
        if line.startswith("### "):
            table = line[4:].strip()
        elif line.startswith("|") and not line.startswith("| PyTorch ") and not line.startswith("|---"):
            rows.append(Row(table, number, split_cells(line)))
    return rows


ROWS = table_rows()


def not_there_spans():
    section = TEXT.split("## What is not there")[1]
    return [text for text, _ in spans(section)]


# ----- what a row claims ----------------------------------------------------------------------------------------------
# a span that no rule can check: a snippet, run on both frameworks (namespace()), that shows the row's claim
SPELLED_OUT = {
    # BatchNorm's state dict counts batches in a 0-d int64 tensor, as torch's
    "num_batches_tracked": 'nn.BatchNorm1d(2).state_dict()["num_batches_tracked"]',
}


@dataclass
class Name:
    span: str
    torch_place: Place
    package_place: Place
    params: list  # None: no parentheses
    decorator: bool


def package_names(cell):
    """The package's names the second column gives: (span, place, params), params None without parentheses."""
    found, previous = [], None
    for text, sep in spans(cell):
        match = NAME.fullmatch(text)
        head = match and match.group(3).split(".")[0]
        if match and not match.group(2) and head in PACKAGE_PREFIXES and "." in match.group(3):
            parts = match.group(3).split(".")[1:]
            place = PACKAGE_PREFIXES[head].child(*parts)
        elif match and "." not in match.group(3) and previous and re.fullmatch(r",\s*|\s*\(also\s*|\s*and\s*", sep):
            place = previous.sibling(match.group(3))  # `tinypytorch.relu`, `sigmoid`
        else:
            # a package name inside a longer span: `with tinypytorch.cuda.max_memory_allocated() as peak:`
            for inner in re.findall(r"\b(?:tinypytorch|tp)((?:\.\w+)+)", text):
                found.append((text, Place("torch", tuple(inner[1:].split("."))), None))
            previous = None
            continue
        params = None if match.group(4) is None else split_arguments(match.group(4))
        found.append((text, place, params))
        previous = place
    return found


def read_row(row):
    """The row's names, parameters (name, param), expressions (span, code), and what no rule could read."""
    first, second = row.cells[0], row.cells[1]
    same = SAME.match(second) is not None
    moved = [] if same else package_names(second)
    names, params, expressions, problems = [], [], [], []
    if first.startswith("(none:"):
        if not package_names(second):
            problems.append("a row for what PyTorch lacks must name the package's names in its second column")
        return names, params, expressions, problems  # PyTorch has no such name
    anchor, member_of = None, None
    for text, sep in spans(first):
        if ";" in sep:
            member_of = None
        if sep.lstrip().startswith(":") and anchor is not None:
            member_of = anchor
        if text in SPELLED_OUT:
            expressions.append((text, SPELLED_OUT[text]))
            continue
        kwarg, match = KWARG.fullmatch(text), NAME.fullmatch(text)
        if kwarg and not match:
            if anchor is None:
                problems.append(f"`{text}`: a parameter with no name before it; write it in parentheses")
            else:
                params.append((anchor, text))
            continue
        if OPERATOR.fullmatch(text):
            expressions.append((text, f"x {text} y"))
            continue
        if not match:
            try:
                ast.parse(text)
                expressions.append((text, text))
            except SyntaxError:
                problems.append(f"`{text}` is neither a name nor Python; spell it out in SPELLED_OUT")
            continue
        decorator, dot, dotted, arguments = match.groups()
        parts, head = dotted.split("."), dotted.split(".")[0]
        arguments = None if arguments is None else split_arguments(arguments)
        if arguments and not decorator and any(is_literal(a) for a in arguments if a != "..."):
            expressions.append((text, text))  # `torch.device("cuda:0")`: called as written
            continue
        if arguments and all(a in PLACEHOLDERS for a in arguments):
            expressions.append((text, text))  # `len(x)`, `module(x)`, `copy.deepcopy(model)`
            continue
        if not dot and "." not in dotted and dotted in PLACEHOLDERS and arguments is None:
            continue  # `y` in "(`y` a tensor)"
        derived_from = None
        if not dot and "." in dotted and head in PREFIXES:
            place = PREFIXES[head].child(*parts[1:])
        elif dot or "." in dotted:
            if dot and anchor is not None:
                place, derived_from = anchor.torch_place.sibling(*parts), (anchor, "sibling")
            else:
                problems.append(f"`{text}`: its prefix is none of PREFIXES; add it there or spell the row out")
                continue
        elif member_of is not None:
            container = lookup(member_of.torch_place, torch) if resolves(member_of.torch_place, torch) else None
            if container is not None and not (inspect.ismodule(container) or inspect.isclass(container)):
                params.append((member_of, dotted))  # `torch.func.grad_and_value`: `argnums`, `has_aux`
                continue
            place, derived_from = member_of.torch_place.child(dotted), (member_of, "child")
        elif row.table in CONTEXTS:
            place = CONTEXTS[row.table].child(dotted)
        elif anchor is not None:
            place, derived_from = anchor.torch_place.sibling(dotted), (anchor, "sibling")
        else:
            problems.append(f"`{text}`: a bare name with nothing to place it beside; write its prefix")
            continue
        if same:
            package_place = place
        else:
            last = place.attrs[-1] if place.attrs else None
            counterparts = [p for _, p, _ in moved if p.attrs and p.attrs[-1] == last]
            bare_span = f"{'.' if dot else ''}{dotted}"
            if counterparts:
                package_place = place if place in counterparts else counterparts[0]
            elif bare_span in RENAMED:
                package_place = RENAMED[bare_span]
            elif derived_from is not None:
                base, how = derived_from
                package_place = getattr(base.package_place, how)(parts[-1])
            else:
                package_place = place
        name = Name(text, place, package_place, arguments, decorator is not None)
        names.append(name)
        params.extend((name, a) for a in arguments or [] if not is_literal(a) or a == "...")
        anchor = name
    if not names and not expressions and not params:
        problems.append("no span of the first column names anything to check")
    return names, params, expressions, problems


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_a_row_of_the_name_map_holds_in_torch_and_in_the_package(row):
    names, params, expressions, problems = read_row(row)
    for name in names:
        try:
            lookup(name.torch_place, torch)
        except AttributeError as error:
            problems.append(f"`{name.span}`: {error} in torch 2.13; the page may only map PyTorch's names")
        try:
            lookup(name.package_place, tinypytorch)
        except AttributeError as error:
            problems.append(f"`{name.span}`: {error} in the package; add the name to the package, name its place in "
                            f"the second column, or move it to 'What is not there'")
        if name.decorator:
            verdict = compare_on_both(f"{name.span}\ndef f():\n    return torch.is_grad_enabled()\nresult = f()")
            if verdict:
                problems.append(f"`{name.span}` as a decorator: {verdict}")
    for name, param in params:
        for fw, place in ((torch, name.torch_place), (tinypytorch, name.package_place)):
            if not resolves(place, fw):
                continue  # reported above
            if fw is tinypytorch and place.attrs[-1:] != name.torch_place.attrs[-1:]:
                continue  # renamed: the second column lists the package's own parameters
            try:
                names_there = parameter_names(lookup(place, fw), fw is tinypytorch)
            except (TypeError, ValueError) as error:
                problems.append(f"`{name.span}`: cannot read the parameters of {place.spelled(fw is tinypytorch)} "
                                f"({error}); list none, or spell the span out in SPELLED_OUT")
                continue
            if parameter_missing(param, names_there):
                where = "torch's" if fw is torch else "the package's"
                problems.append(f"`{name.span}`: `{param}` is not a parameter of {where} "
                                f"{place.spelled(fw is tinypytorch)}{sorted(names_there)}; write torch's name")
    for text, code in expressions:
        verdict = compare_on_both(code)
        if verdict:
            problems.append(f"`{text}` ({code!r}): {verdict}")
    for text, place, arguments in package_names(row.cells[1]):
        if not resolves(place, tinypytorch):
            problems.append(f"second column, `{text}`: {place.spelled(True)} does not exist in the package")
            continue
        names_there = parameter_names(lookup(place, tinypytorch), True) if arguments else set()
        problems.extend(f"second column, `{text}`: `{a}` is not a parameter of {place.spelled(True)}"
                        for a in arguments or [] if not is_literal(a) and parameter_missing(a, names_there))
    if re.match(r"^same, and ", row.cells[1]):  # "same, and `x.square()`": PyTorch has those too
        for text, place, _ in package_names(row.cells[1]):
            if not resolves(place, torch):
                problems.append(f"second column, `{text}`: torch has no {place.spelled(False)}; drop 'and' or it")
    step = row.cells[2]
    if step != "no step" and not DOC_LINK.fullmatch(step):
        problems.append(f"third column {step!r}: write 'no step' or one {{doc}} link to a step")
    assert not problems, row.label + "\n  " + "\n  ".join(problems)


def test_the_name_map_has_rows_with_three_cells():
    assert len(ROWS) > 100
    bad = [row.label for row in ROWS if len(row.cells) != 3]
    assert not bad, "rows without three cells (PyTorch | tinypytorch | Step):\n" + "\n".join(bad)


# ----- what is not there ----------------------------------------------------------------------------------------------

@dataclass
class Absent:
    """PyTorch has the name (a page spelling, PREFIXES), the package has not."""
    name: str


@dataclass
class Refused:
    """The package refuses what the code does (with `exception`), which torch runs."""
    code: str
    exception: type
    torch_runs: bool = True


@dataclass
class Present:
    """The bullet names this as what the package has (code that runs in the package)."""
    code: str


# "What is not there" mixes what is missing with what is there instead; each of its spans says which, here, unless it
# is a name with a prefix of PREFIXES, which must then be missing from the package at its place.
NOT_THERE = {
    "register_module_forward_hook": Absent("torch.nn.modules.module.register_module_forward_hook"),
    "register_backward_hook": Absent("module.register_backward_hook"),
    "nn.BatchNorm1d": Present("nn.BatchNorm1d(3)"),
    "nn.BatchNorm2d": Present("nn.BatchNorm2d(3)"),
    "tinypytorch.layers.BatchNorm1d": Present("isinstance(torch.layers.BatchNorm1d(3), torch.layers.Layer)"),
    "num_batches_tracked": Present("assert type(torch.layers.BatchNorm1d(3).num_batches_tracked) is int"),
    "torch.autocast": Absent("torch.bfloat16"),  # its CPU default
    "conv1d": Absent("F.conv1d"),
    "conv3d": Absent("F.conv3d"),
    "nn.ConvTranspose2d": Absent("nn.ConvTranspose2d"),
    "max_pool1d": Absent("F.max_pool1d"),
    "nn.Conv2d": Refused("nn.Conv2d(1, 1, 3, padding=1, padding_mode='reflect')", NotImplementedError),
    "'zeros'": Present("nn.Conv2d(1, 1, 3, padding=1, padding_mode='zeros')"),
    "torch.func": Present("torch.func.vmap(torch.sin)(x)"),  # its vmap
    "chunk_size": Present("torch.func.jacrev(torch.sin, chunk_size=1)(x)"),
    "vectorize=True": Present("torch.autograd.functional.jacobian(torch.sin, x, vectorize=True)"),
    "jacrev(jacfwd(f))": Refused("torch.func.jacrev(torch.func.jacfwd(torch.sin))(x)", NotImplementedError),
    "jacfwd": Present("torch.func.jacfwd(torch.sin)(x)"),
    "jvp": Present("torch.func.jvp(torch.sin, (x,), (x,))"),
    "hessian": Present("torch.func.hessian(lambda t: t.sin().sum())(x)"),
    "jacfwd(jacfwd(f))": Refused("torch.func.jacfwd(torch.func.jacfwd(torch.sin))(x)", NotImplementedError),
    "jacfwd(jacrev(f))": Present("torch.func.jacfwd(torch.func.jacrev(torch.sin))(x)"),
    "nn.Embedding(sparse=True)": Refused("nn.Embedding(3, 2, sparse=True)", NotImplementedError),
    "capturable=True": Refused("torch.optim.RMSprop(model.parameters(), capturable=True)", NotImplementedError,
                               torch_runs=False),  # torch's wants its parameters on a GPU
    "differentiable=True": Refused("torch.optim.Adadelta(model.parameters(), differentiable=True)",
                                   NotImplementedError),
    "OneCycleLR": Absent("optim.lr_scheduler.OneCycleLR"),
    "ReduceLROnPlateau": Absent("optim.lr_scheduler.ReduceLROnPlateau"),
    "x.requires_grad_()": Refused("torch.tensor([1j, 2j]).requires_grad_()", RuntimeError),  # x complex
    "torch.jit": Absent("torch.jit"),
    "add_": Present("x.add_(y)"),
    "sub_": Present("x.sub_(y)"),
    "mul_": Present("x.mul_(y)"),
    "div_": Present("x.div_(y)"),
    "zero_": Present("x.zero_()"),
    "copy_": Present("x.copy_(y)"),
    "sin_": Present("x.sin_()"),
    "unsqueeze_": Present("x.unsqueeze_(0)"),
    "bitwise_xor_": Present("torch.tensor([1, 2]).bitwise_xor_(torch.tensor([3, 3]))"),
    "scatter_": Present("torch.zeros(3).scatter_(0, torch.tensor([1]), 1.0)"),
    "F.relu_": Present("F.relu_(x)"),
    "clamp_": Absent("x.clamp_"),
    "exp_": Absent("x.exp_"),
    "F.dropout(x, inplace=True)": Refused("F.dropout(x, inplace=True)", ValueError),
    "num_workers": Present("torch.utils.data.DataLoader([1, 2], num_workers=2)"),
    "worker_init_fn": Refused("torch.utils.data.DataLoader([1, 2], num_workers=2, worker_init_fn=print)",
                              NotImplementedError),
    "batch_sampler": Refused("torch.utils.data.DataLoader([1, 2], batch_sampler=[[0, 1]])", TypeError),
    "timeout": Refused("torch.utils.data.DataLoader([1, 2], timeout=1)", TypeError),
    "x.pin_memory()": Absent("x.pin_memory"),
    "pin_memory": Present("torch.utils.data.DataLoader([1, 2], pin_memory=True)"),
    "torch.compile": Refused("torch.compile(model)", NotImplementedError),
    "nn.DataParallel": Refused("nn.DataParallel(model)", NotImplementedError),
    "nn.RNN": Refused("nn.RNN(2, 3)", NotImplementedError),
    "nn.LSTM": Refused("nn.LSTM(2, 3)", NotImplementedError),
    "nn.GRU": Refused("nn.GRU(2, 3)", NotImplementedError),
    "nn.Linear": Present("nn.Linear(2, 3)"),
    "tanh": Present("torch.tanh(x)"),
    "sigmoid": Present("torch.sigmoid(x)"),
    "torch.profiler.profile": Refused("torch.profiler.profile()", NotImplementedError),
    "torch.autograd.profiler.profile": Refused("torch.autograd.profiler.profile()", NotImplementedError),
    "torch.utils.benchmark.Timer": Present("torch.utils.benchmark.Timer('1 + 1').timeit(1)"),
    "DataLoader": Present("torch.utils.data.DataLoader([1, 2])"),
    "save_on_cpu(pin_memory=True)": Present("torch.autograd.graph.save_on_cpu(pin_memory=True)"),
}


def place_of(name):
    """The place of a page spelling with a prefix of PREFIXES (`F.conv1d`, `x.clamp_`)."""
    head, *rest = name.split(".")
    return PREFIXES[head].child(*rest)


def run_on(fw, code):
    ns = namespace(fw, OPERANDS[0])
    ns["x"] = ns["x"].detach()
    return run_code(code, ns)


def check_not_there(span):
    """What is wrong with the page's saying of span under "What is not there", or None."""
    entry = NOT_THERE.get(span)
    if entry is None and isinstance(getattr(builtins, span, None), type) and \
            issubclass(getattr(builtins, span), Exception):
        return None  # `NotImplementedError` says how the span next to it refuses, which that span's entry checks
    if entry is None:
        match = NAME.fullmatch(span)
        if not (match and match.group(3).split(".")[0] in PREFIXES and "." in match.group(3) and not match.group(4)):
            return "a span of this section with no entry in NOT_THERE: say there what it claims (Absent, Refused, " \
                "Present)"
        entry = Absent(match.group(3))
    if isinstance(entry, Absent):
        place = place_of(entry.name)
        if not resolves(place, torch):
            return f"torch 2.13 has no {place.spelled(False)}: name what PyTorch has"
        if resolves(place, tinypytorch):
            return (f"the package has {place.spelled(True)}: move it from 'What is not there' to a table of the name "
                    f"map (and its NOT_THERE entry out of this file)")
        return None
    if isinstance(entry, Refused):
        if entry.torch_runs:
            try:
                run_on(torch, entry.code)
            except Exception as error:  # noqa: BLE001
                return f"torch refuses {entry.code!r} too ({type(error).__name__}: {error}): not a missing feature"
        try:
            run_on(tinypytorch, entry.code)
        except entry.exception:
            return None
        except Exception as error:  # noqa: BLE001
            return f"{entry.code!r} raises {type(error).__name__} ({error}), not {entry.exception.__name__}"
        return (f"the package runs {entry.code!r}, which the page says it refuses: move it to a table of the name map "
                f"(and its NOT_THERE entry out of this file)")
    try:
        run_on(tinypytorch, entry.code)
    except Exception as error:  # noqa: BLE001
        return f"the page names it as there, but {entry.code!r} raises {type(error).__name__}: {error}"
    return None


@pytest.mark.parametrize("span", not_there_spans())
def test_what_is_not_there_is_not_there_or_refuses(span):
    problem = check_not_there(span)
    assert problem is None, f"book/pytorch_users.md, 'What is not there', `{span}`: {problem}"


def test_every_entry_of_not_there_is_a_span_of_the_section():
    stale = set(NOT_THERE) - set(not_there_spans())
    assert not stale, f"NOT_THERE names spans the page no longer has (remove them): {sorted(stale)}"


def test_every_spelled_out_span_is_on_the_page():
    first_columns = {text for row in ROWS for text, _ in spans(row.cells[0])}
    stale = set(SPELLED_OUT) - first_columns
    stale |= {name for name in RENAMED if not any(name in row.cells[0] for row in ROWS)}
    assert not stale, f"SPELLED_OUT or RENAMED name spans the page no longer has (remove them): {sorted(stale)}"


# ----- step links -----------------------------------------------------------------------------------------------------

def test_every_step_link_leads_to_a_notebook_of_that_step():
    links = DOC_LINK.findall(TEXT)
    assert len(links) > 50
    problems = []
    for text, target in links:
        if not (ROOT / "notebooks" / f"{target}.ipynb").exists():
            problems.append(f"{{doc}}`{text}<notebooks/{target}>`: notebooks/{target}.ipynb does not exist")
        if re.sub(r"\D", "", text) != target[4:]:
            problems.append(f"{{doc}}`{text}<notebooks/{target}>`: the text names another step than the link")
    assert not problems, "book/pytorch_users.md:\n" + "\n".join(problems)
