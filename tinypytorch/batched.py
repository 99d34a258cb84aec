"""The batched Variable of vmap: one Variable that stands for a whole batch of them, one per sample.

    BatchedVariable(physical, level)   `physical` holds the batch, its dim 0 the batch dim of vmap level `level`;
                                       the BatchedVariable is one sample of it: its shape is physical's without
                                       dim 0 (the LOGICAL shape), and so are ndim, size(), len() and dim().

Nested vmaps nest BatchedVariables: the physical value of a level may itself be batched at an outer (lower)
level, so a Variable batched at levels 1 and 2 is BatchedVariable(BatchedVariable(array's Variable, 1), 2), whose
innermost array has level 1's batch dim first, then level 2's, then the logical dims. The outermost wrapper
always has the highest level: `batched` keeps that order. The autograd graph, if any, is recorded on the
innermost Variables, which the operations run on; a BatchedVariable is never in a graph itself.

What would look at one sample's values (item(), bool(), numpy(), tolist(), .data) raises PyTorch's errors:
inside vmap there is no one sample to look at.
"""
from tinypytorch import batching_state, cuda
from tinypytorch.core import Variable
from tinypytorch.size import Size

# PyTorch's words
ITEM = ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over calling .item() on a "
        "Tensor, please try to rewrite what you're doing with other operations. If error is occurring somewhere "
        "inside PyTorch internals, please file a bug report.")
CONTROL_FLOW = ("vmap: It looks like you're attempting to use a Tensor in some data-dependent control flow. We "
                "don't support that yet, please file an issue at https://github.com/pytorch/pytorch/issues .")
NO_STORAGE = "Cannot access data pointer of Tensor that doesn't have storage"
DATA = "accessing `data` under vmap transform is not allowed"
REQUIRES_GRAD_ = ("You are attempting to call Tensor.requires_grad_() (or perhaps using torch.autograd.functional.* "
                  "APIs) inside of a function being transformed by a functorch transform. This is unsupported, please "
                  "attempt to use the functorch transforms (e.g. grad, vjp, jacrev, jacfwd, hessian) or call "
                  "requires_grad_() outside of a function being transformed instead.")


class BatchedVariable(Variable):
    """A batch of Variables seen as one sample (its logical shape) inside vmap level `level`."""

    # what Function.__call__ and the engine read of a Variable; a batched one is never recorded in a graph
    creator, grad, name, view_record, version_counter, generation = None, None, None, None, None, 0

    def __init__(self, physical, level):  # (Variable.__init__ is not called: there is no array of its own)
        self.physical, self.level = physical, level

    @property
    def data(self):
        """Not an array (there is none of one sample): what the package reads of an array, its shape and dtype,
        is there; anything that would compute with it raises PyTorch's error."""
        return LogicalData(self)

    # the logical shape: physical's without the batch dim
    @property
    def shape(self):
        return Size(self.physical.shape[1:])

    @property
    def ndim(self):
        return self.physical.ndim - 1

    def dim(self):
        return self.ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for length in self.shape:
            n *= length
        return n

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def dtype(self):
        return self.physical.dtype

    @property
    def device(self):
        return self.physical.device

    def is_floating_point(self):
        return self.physical.is_floating_point()

    # autograd: that of the physical value, on which the graph is recorded
    @property
    def requires_grad(self):
        return self.physical.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self.physical.requires_grad = value

    @property
    def _requires_grad(self):
        return self.physical._requires_grad

    @property
    def is_leaf(self):
        return self.physical.is_leaf

    @property
    def grad_fn(self):
        return self.physical.grad_fn

    def detach(self):
        return BatchedVariable(self.physical.detach(), self.level)

    def requires_grad_(self, requires_grad=True):  # PyTorch refuses the method (not the attribute) inside vmap
        raise RuntimeError(REQUIRES_GRAD_)

    # memory layout: that of one sample's elements in the innermost array (whose last dims are the logical ones),
    # as PyTorch reads a batched tensor's strides without its batch dims
    def is_contiguous(self):
        array = innermost(self).data
        if 0 in array.shape:
            return True  # (no elements: any layout is C order)
        return bool(array[(0,) * (array.ndim - self.ndim)].flags.c_contiguous)

    def contiguous(self):
        from tinypytorch.core import Clone
        return self if self.is_contiguous() else Clone(contiguous=True)(self)

    def view(self, *shape):
        """reshape that never copies, as Variable.view: the batch's reshape must view the innermost array."""
        y = self.reshape(*shape)
        before, after = innermost(self).data, innermost(y).data
        if after.size and not cuda.get_array_module(after).may_share_memory(after, before):
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                               "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        return y

    # one sample's values: not there inside vmap (PyTorch's errors)
    def item(self):
        raise RuntimeError(ITEM)

    __float__ = __int__ = __index__ = item

    def __bool__(self):
        raise RuntimeError(CONTROL_FLOW)

    def numpy(self):
        raise RuntimeError(NO_STORAGE)

    tolist = __array__ = numpy

    def __repr__(self):
        return f"BatchedVariable(lvl={self.level}, bdim=0, value=\n{self.physical!r})"  # as PyTorch prints one


def _refuse(*args, **kwargs):
    raise RuntimeError(DATA)


class LogicalData:
    """The `.data` of a BatchedVariable: the shape, dtype, ndim, size and itemsize of one sample's array, which the
    package's checks read; its values are not there, so NumPy cannot take it, nor arithmetic or indexing."""

    __array_ufunc__ = None  # NumPy's operators give way to this class's, which refuse
    __array__ = __getitem__ = __setitem__ = __iter__ = __len__ = __bool__ = item = tolist = astype = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __pow__ = _refuse
    __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __iadd__ = __isub__ = __imul__ = __itruediv__ = _refuse

    def __init__(self, x):
        self.shape, self.ndim = tuple(x.shape), x.ndim
        self.dtype = innermost(x).data.dtype
        self.size, self.itemsize = x.numel(), self.dtype.itemsize
        self.strides = None

    def __getattr__(self, name):  # anything else of an array: its values
        raise RuntimeError(DATA)


batching_state.batched_type = BatchedVariable


def is_batched(x, level=None):
    """Whether x is a BatchedVariable (at `level`, if given: only the outermost wrapper is the highest level)."""
    return isinstance(x, BatchedVariable) and (level is None or x.level == level)


def batched(value, level):
    """The BatchedVariable of level `level` whose batch is dim 0 of the (logical) `value`. If `value` is batched
    at a higher level, that level stays outermost: its wrapper goes outside, level's dim moved to 0 inside it."""
    if isinstance(value, BatchedVariable) and value.level > level:
        inner = _move_dim(value.physical, 1, 0)  # physical: (higher level's batch, level's batch, ...)
        return BatchedVariable(batched(inner, level), value.level)
    return BatchedVariable(value, level)


def unbatched(x, level):
    """x's value at `level` with that level's batch dim at 0 (the physical value, one dim more than x's logical),
    or None if x is not batched at `level` (a number, an array, a Variable batched only at lower levels)."""
    if not isinstance(x, BatchedVariable) or x.level < level:
        return None
    if x.level == level:
        return x.physical
    inner = unbatched(x.physical, level)  # x batched at a higher level too: that level stays outside
    return None if inner is None else BatchedVariable(_move_dim(inner, 0, 1), x.level)


def levels_of(x):
    """The vmap levels at which x is batched, outermost wrapper first (highest level first)."""
    found = []
    while isinstance(x, BatchedVariable):
        found.append(x.level)
        x = x.physical
    return found


def innermost(x):
    """The Variable inside every wrapper of x: what the graph is recorded on."""
    while isinstance(x, BatchedVariable):
        x = x.physical
    return x


def materialized(x, numbers):
    """x with the batch dims of vmap levels `numbers` (ascending) made logical dims in front, in that order: a value
    whose logical shape is (size of numbers[0], ..., size of numbers[-1]) + x's shape, batched at x's other levels.
    A level at which x is not batched is broadcast. Where x is batched at exactly `numbers`, this is x's innermost
    Variable itself (so a leaf stays the leaf)."""
    if not numbers:
        return x
    *outer, top = numbers
    if isinstance(x, BatchedVariable) and x.level > top:  # a level not asked for stays a wrapper, outermost
        inner = materialized(x.physical, numbers)  # (numbers' dims..., x.level's dim, ...): x.level's to 0
        return BatchedVariable(_move_dim(inner, len(numbers), 0), x.level)
    if isinstance(x, BatchedVariable) and x.level == top:
        return materialized(x.physical, outer)  # x.physical's dim 0 is top's; outer's go in front of it
    inner = materialized(x, outer)  # x not batched at top: broadcast it in, after outer's dims
    return _broadcast_in(inner, len(outer), batching_state.size_of(top))


def rebatched(x, numbers):
    """`materialized`'s inverse: x's leading logical dims made the batch dims of levels `numbers` (ascending), the
    lowest level's first."""
    for number in numbers:
        x = batched(x, number)
    return x


def _move_dim(x, source, destination):
    """x (logical) with dim `source` moved to `destination`: a recorded permutation, or x itself."""
    if source == destination:
        return x
    from tinypytorch.functions import movedim
    return movedim(x, source, destination)


def _broadcast_in(x, position, size):
    """x with a new dim of length `size` at `position`, its values repeated along it (a broadcast view)."""
    from tinypytorch.functions import broadcast_to, unsqueeze
    y = unsqueeze(x, position)
    return broadcast_to(y, y.shape[:position] + (size,) + y.shape[position + 1:])


def is_array(x):
    return isinstance(x, cuda.array_types)
