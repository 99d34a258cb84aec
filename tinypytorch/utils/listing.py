"""Code shown on a step's page: the package's code as it stood at a step (stage 4 on), and what a step
of stages 1-2 changed in its own framework (`show_change`).

A statement tagged with a later step than the one being read (`x = y  # step 37: why`, or a
comment line `# step 37: why` just above it) is left out, with its body if it has one; so is a
block whose every statement was left out. A statement tagged `# speed: why` belongs to no step
(the book's chapter "How tinypytorch is made fast" explains it) and is left out of every step's
listing; so is one tagged `# no step: why`, PyTorch's surface that no step builds (the page for
PyTorch users marks it "no step"). What remains must still be valid Python, or
`source_at_step` says which listing needs its tags fixed.

It serves only the book, yet lives in the package: steps run as `python steps/stepNN.py` (so
Python looks in steps/) and notebooks run in notebooks/, and only the installed package is
found from both without a `sys.path` line in every step, which the architecture rules out.
"""
import ast
import difflib
import inspect
import io
import math
import pathlib
import re
import textwrap
import tokenize

_OPENS_BLOCK = re.compile(r":\s*(#.*)?$")  # a line ending in a colon, before any comment
_TAG = re.compile(r"#\s*(?:step (\d+)\b|speed\b|no step\b)")


def source_at_step(obj, step=None):
    """The source of `obj` (dedented), without the statements a step after `step` added."""
    source = textwrap.dedent(inspect.getsource(obj))
    if step is None:
        return source
    lines = source.splitlines()
    tags, full_line = _step_tags(source, lines)
    tree = ast.parse(source)
    dropped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            dropped |= _lines_if_later(node, lines, tags, full_line, step)
    _drop_emptied_blocks(tree, dropped, lines)
    kept = _tidy_blank_lines([line for i, line in enumerate(lines) if i not in dropped])
    name = getattr(obj, "__qualname__", repr(obj))
    if not kept:
        raise ValueError(f"{name} did not exist at step {step}")
    result = "\n".join(kept) + "\n"
    try:
        ast.parse(result)
    except SyntaxError as error:
        raise ValueError(f"{name} at step {step} is not valid Python ({error.msg}, line {error.lineno}): "
                         "tag the enclosing statement instead") from None
    return result


def _step_tags(source, lines):
    """{line index: step} for every comment that starts with `step N`, and the indices of comment-only lines."""
    tags, full_line = {}, set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, column = token.start[0] - 1, token.start[1]
            if not lines[row][:column].strip():
                full_line.add(row)
            match = _TAG.match(token.string)
            if match:
                tags[row] = int(match.group(1)) if match.group(1) else math.inf  # speed: in no step
    return tags, full_line


def _lines_if_later(node, lines, tags, full_line, step):
    """The lines of `node` (and the comment lines just above it) when its tag is a later step; else none."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    above = first
    while above - 1 in full_line:
        above -= 1
    tag = tags.get(node.lineno - 1) if node.lineno - 1 not in full_line else None
    if tag is None and above < first:
        tag = tags.get(above)
    if tag is None or tag <= step:
        return set()
    return set(range(above, node.end_lineno))


def _drop_emptied_blocks(tree, dropped, lines):
    """A compound statement whose body (and `else`) was left out entirely goes too, innermost first; an `else`
    whose statements were all left out goes without its `if`."""
    def emptied(statements):
        return all(set(range(s.lineno - 1, s.end_lineno)) <= dropped for s in statements)

    for node in reversed(list(ast.walk(tree))):
        body = getattr(node, "body", None)
        if not (isinstance(node, ast.stmt) and isinstance(body, list) and body):
            continue
        orelse = getattr(node, "orelse", None) or []
        if emptied(body) and emptied(orelse):
            dropped |= set(range(node.lineno - 1, node.end_lineno))
        elif orelse and emptied(orelse) and isinstance(node, ast.If):
            else_line = next(i for i in range(orelse[0].lineno - 2, body[-1].end_lineno - 1, -1)
                             if lines[i].strip().startswith(("else", "elif")))
            dropped |= set(range(else_line, node.end_lineno))


def _tidy_blank_lines(lines):
    """No blank line after a blank line, after a block's opening line, or at either end, where statements were
    left out."""
    tidy = []
    for line in lines:
        if not line.strip() and (not tidy or not tidy[-1].strip() or _OPENS_BLOCK.search(tidy[-1])):
            continue
        tidy.append(line)
    while tidy and not tidy[-1].strip():
        tidy.pop()
    return tidy


def show_code(*objects, step=None):
    """Show package code highlighted in Jupyter and the book, and as plain text when run as a script.

    `step`: show each object as it stood at that step (`source_at_step`).
    """
    shell = _shell()
    for obj in objects:
        source = source_at_step(obj, step)
        if shell is None:
            print(source)
        else:
            import IPython
            IPython.display.display(IPython.display.Code(source, language="python"))


STEPS = pathlib.Path(__file__).resolve().parents[2] / "steps"  # the installed package is the repository's (pip -e)


def _definition(step, dotted):
    """The source of the top-level class or function `dotted` ("Variable" or "Variable.backward") in
    steps/stepNN.py, or None where that step has none."""
    source = (STEPS / f"step{step:02d}.py").read_text()
    body = ast.parse(source).body
    node = None
    for name in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])  # with its decorators
    return textwrap.dedent("\n".join(source.splitlines()[first - 1:node.end_lineno]))  # whole lines: end comments


def change_since(step, name, since=None, context=2):
    """The unified diff of `name` between steps/step{since}.py (default: the step before) and
    steps/step{step}.py, hunk headers replaced by the name; every line added where `name` is new."""
    since = step - 1 if since is None else since
    old, new = _definition(since, name), _definition(step, name)
    if new is None:
        raise ValueError(f"step {step} defines no {name}")
    if old == new:
        return f"# {name}: unchanged since step {since}\n"
    diff = list(difflib.unified_diff((old or "").splitlines(), new.splitlines(), lineterm="", n=context))[2:]
    first = iter([f"@@ {name}: step {since} -> step {step} @@"])
    return "\n".join(next(first, "@@ ... @@") if line.startswith("@@") else line for line in diff) + "\n"


def show_change(step, *names, since=None, context=2):
    """Show, highlighted, what step `step` changed in each of `names` since step `since` (default: the step
    before): removed lines in red with a '-', added lines in green with a '+', `context` lines around them."""
    text = "".join(change_since(step, name, since, context) for name in names)
    shell = _shell()
    if shell is None:
        print(text)
    else:
        import IPython
        IPython.display.display(IPython.display.Code(text, language="diff"))


def _shell():
    try:
        import IPython
    except ImportError:
        return None
    return IPython.get_ipython()
