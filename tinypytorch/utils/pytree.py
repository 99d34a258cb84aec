"""Pytrees, as PyTorch's `torch.utils._pytree` has them: containers nested in containers, with leaves (step 65).

    leaves, spec = tree_flatten(tree)    the leaves, left to right, and the structure they sat in
    tree_unflatten(leaves, spec)         the same structure around other leaves
    tree_map(fn, tree)                   fn applied to every leaf, the structure kept

Containers are tuples, lists, dicts (their keys in insertion order, which is part of the structure),
OrderedDicts and namedtuples; anything else is a leaf: a Variable, a number, None. `tinypytorch.func`'s
transforms take and return pytrees of Variables: a dict of parameters, a tuple of outputs.
Two specs are equal when the structures are; a spec prints as PyTorch's, for the messages that show it.
"""
import collections


class TreeSpec:  # step 65
    """A structure: its container type, what rebuilds it beside the children (a dict's keys, a namedtuple's
    class) and its children's specs; a leaf's spec has no type."""

    def __init__(self, type, context, children):  # noqa: A002 (PyTorch's name)
        self.type, self.context, self.children = type, context, list(children)
        self.num_leaves = 1 if type is None else sum(child.num_leaves for child in self.children)

    def is_leaf(self):
        return self.type is None

    def __eq__(self, other):
        return isinstance(other, TreeSpec) and (self.type, self.context, self.children) == (
            other.type, other.context, other.children)

    __hash__ = None

    def __repr__(self, indent=0):
        """PyTorch's: TreeSpec(tuple, None, [*,\\n  *]), a leaf as *, each child below the first on its own line."""
        if self.is_leaf():
            return "*"
        name = "namedtuple" if self.type is _NAMEDTUPLE else self.type.__name__
        children = [child.__repr__(indent + 2) for child in self.children]
        return f"TreeSpec({name}, {self.context}, [" + (",\n" + " " * (indent + 2)).join(children) + "])"


_NAMEDTUPLE = object()  # the type of every namedtuple's spec: its class is the context
LEAF = TreeSpec(None, None, [])


def _node(tree):
    """(type, context, children) of a container, or None for a leaf."""
    kind = type(tree)
    if kind in (tuple, list):
        return kind, None, list(tree)
    if kind in (dict, collections.OrderedDict):
        return kind, list(tree), list(tree.values())
    if isinstance(tree, tuple) and hasattr(kind, "_fields"):
        return _NAMEDTUPLE, kind, list(tree)
    return None


def tree_flatten(tree):  # step 65
    """(leaves, spec): the leaves of `tree` in order, and its structure."""
    node = _node(tree)
    if node is None:
        return [tree], LEAF
    kind, context, children = node
    leaves, specs = [], []
    for child in children:
        child_leaves, child_spec = tree_flatten(child)
        leaves += child_leaves
        specs.append(child_spec)
    return leaves, TreeSpec(kind, context, specs)


def tree_unflatten(leaves, spec):  # step 65
    """The structure `spec` rebuilt around `leaves` (as many as it has)."""
    leaves = list(leaves)
    if len(leaves) != spec.num_leaves:
        raise ValueError(f"tree_unflatten: {len(leaves)} leaves for a structure that holds {spec.num_leaves}")
    return _build(iter(leaves), spec)


def _build(leaves, spec):
    if spec.is_leaf():
        return next(leaves)
    children = [_build(leaves, child) for child in spec.children]
    if spec.type is _NAMEDTUPLE:
        return spec.context(*children)
    if spec.type in (dict, collections.OrderedDict):
        return spec.type(zip(spec.context, children))
    return spec.type(children)


def tree_map(fn, tree):  # step 65
    """`tree` with every leaf replaced by fn(leaf)."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(leaf) for leaf in leaves], spec)


class _Star:
    def __repr__(self):
        return "*"


def treespec_pprint(spec):  # step 65
    """The structure written as Python writes the container, a leaf as *: (*, {'a': *}), P(x=*, y=*)."""
    return repr(tree_unflatten([_Star()] * spec.num_leaves, spec))
