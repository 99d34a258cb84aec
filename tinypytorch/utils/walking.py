"""Walking the graph behind a Variable: the functions it depends on (step 24), what they saved (step 35)."""
from tinypytorch import autograd
from tinypytorch.core import Function


def functions_in_graph(y):
    """Every Function that `y` depends on, in the order a walk from `y.creator` first meets them (step 24)."""
    found, seen, todo = [], set(), [y.creator]
    while todo:  # step 08: a loop, so any depth will do
        f = todo.pop()
        if isinstance(f, Function) and f not in seen:
            seen.add(f)
            found.append(f)
            todo.extend(node for node, _ in f.edges)  # a leaf or None ends the walk there (edges: step 35)
    return found


def saved_tensors(y):
    """What the graph behind `y` keeps for backward (step 35): (function, SavedTensor) pairs, in walk order."""
    return [(f, s) for f in functions_in_graph(y) for s in f.saved if isinstance(s, autograd.graph.SavedTensor)]
