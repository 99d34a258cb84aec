"""Every mode of the package in one place: what operations and backward passes ask before they act.

    grad mode           operations record the graph: no_grad (step 18), enable_grad, set_grad_enabled (step 57)
    inference mode      no graph, and new tensors are inference tensors: no version counter, no view record (step 58)
    formulas on arrays  a backward formula computes on bare arrays: the engine's speed path (step 33)
    saved-tensor hooks  the (pack, unpack) pairs of the saved_tensors_hooks contexts entered (step 38)
    anomaly mode        every function keeps the stack that made it; backward checked for NaN (step 39)
    recomputation       a forward computation runs again for backward: checkpointing, reversible blocks (42-47)

Each is set only through this module's functions and context managers, and asked through them,
except on the hottest paths of the kernel (core's Function.__call__ and Variable.__init__, the engine,
saved tensors), which read `Config.enable_backprop`, `open_inference_blocks` and `InferenceMode.enabled`,
`BackwardMode.arrays` and `SavedTensorsHooks.stack` directly: a call per operation would cost more than the
operation's bookkeeping.
As in PyTorch, every mode but anomaly mode belongs to the
thread that set it (threading.local): `no_grad` in one thread does not stop another from recording.
Anomaly mode is one switch for the whole process, as PyTorch's is. Inference mode is also an entry of the
mode stack (tinypytorch.modes), which operations ask at their door. This module imports nothing of the package
but that stack: it is the ground floor that every other floor may ask.
"""
import contextlib
import functools
import inspect
import threading

from tinypytorch import modes


# ----- grad mode (step 18) ---------------------------------------------------------------------------

class _Config(threading.local):
    """The options of `Config`: each thread sees its own values, starting from these class-level defaults."""

    enable_backprop = True


Config = _Config()  # step 18's name: `Config.enable_backprop` is read by every operation


@contextlib.contextmanager
def using_config(name, value):
    """Set `Config.<name>` to `value` inside a `with` block, in this thread; the old value returns even on error."""
    # step 18: with a misspelt name, setattr would silently create a new option
    known = [option for option in vars(_Config) if not option.startswith("_")]
    if name not in known:
        raise ValueError(f"using_config: unknown option {name!r}; known options: {', '.join(known)}")
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:
        setattr(Config, name, old_value)


class _DecoratorContextManager:
    """A mode that is a context manager and also decorates a function: each call runs inside a fresh copy of
    the mode; a generator function's body runs inside it at each step, and outside it between (PyTorch's)."""

    def __call__(self, func):
        if inspect.isgeneratorfunction(func):
            return self._wrap_generator(func)

        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return decorated

    def _wrap_generator(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            generator = func(*args, **kwargs)
            try:
                with self.clone():
                    value = next(generator)
                while True:
                    try:
                        sent = yield value  # the caller runs outside the mode
                    except GeneratorExit:
                        with self.clone():
                            generator.close()
                        raise
                    except BaseException as error:  # thrown in: the generator handles it inside the mode
                        with self.clone():
                            value = generator.throw(error)
                    else:
                        with self.clone():
                            value = generator.send(sent)
            except StopIteration as stop:
                return stop.value

        return decorated

    def clone(self):
        return type(self)()


class _NoParamDecoratorContextManager(_DecoratorContextManager):
    """A mode without argument, which also decorates bare: `@no_grad` as `@no_grad()` (PyTorch's)."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamDecoratorContextManager):  # noqa: N801 (PyTorch's name); step 18
    """Operations inside it record no graph: a context manager, or a function's decorator."""

    def __enter__(self):
        self.previous = Config.enable_backprop
        Config.enable_backprop = False

    def __exit__(self, *exc_info):
        Config.enable_backprop = self.previous


class enable_grad(_NoParamDecoratorContextManager):  # noqa: N801 (PyTorch's name)
    """Operations inside it record the graph, even inside no_grad: a context manager, or a decorator."""

    def __enter__(self):
        self.previous = Config.enable_backprop
        Config.enable_backprop = True

    def __exit__(self, *exc_info):
        Config.enable_backprop = self.previous


def is_grad_enabled():
    """Whether operations record the graph now, in this thread (PyTorch's `torch.is_grad_enabled`)."""
    return Config.enable_backprop


class set_grad_enabled(_DecoratorContextManager):  # noqa: N801 (PyTorch's name)
    """Switch recording on or off in this thread (PyTorch's `torch.set_grad_enabled`).

    Called, it switches at once, until changed; used in a `with` block, or as a decorator, the old mode
    returns at the end of the block or call.
    """

    def __init__(self, mode):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {type(mode).__name__}")
        self.previous, self.mode = Config.enable_backprop, mode
        Config.enable_backprop = mode

    def __call__(self, func):
        Config.enable_backprop = self.previous  # decorating switches nothing: each call does (PyTorch's)
        return super().__call__(func)

    def __enter__(self):
        Config.enable_backprop = self.mode

    def __exit__(self, *exc_info):
        Config.enable_backprop = self.previous

    def clone(self):
        return type(self)(self.mode)


# ----- inference mode (step 58) ----------------------------------------------------------------------

class _InferenceMode(threading.local):
    """Whether inference mode is on in this thread: Variable.__init__ reads it for every new tensor."""

    enabled = False


InferenceMode = _InferenceMode()
# speed: how many inference_mode blocks are open now, in all threads. While none is, the hot paths (Variable.__init__,
# Function.__call__) skip reading the thread-local, which costs about 70 ns in Python 3.11: 7% of making a 0-d Variable
open_inference_blocks = 0
_blocks_lock = threading.Lock()


def _count_inference_block(change):
    global open_inference_blocks
    with _blocks_lock:
        open_inference_blocks += change
    (modes.opened if change > 0 else modes.closed)("inference")


def recording_nothing(function, inputs, below):  # step 68: inference mode's entry of the mode stack
    """In inference mode the operation runs below with recording off, even under enable_grad (which turns
    grad mode back on inside it); forward AD, further down, pushes no tangents then either."""
    if not InferenceMode.enabled or not Config.enable_backprop:  # another thread's block, or recording off anyway
        return below(inputs)
    Config.enable_backprop = False
    try:
        return below(inputs)
    finally:
        Config.enable_backprop = True


modes.register("inference", recording_nothing)


def is_inference_mode_enabled():
    """Whether inference mode is on now, in this thread (PyTorch's `torch.is_inference_mode_enabled`)."""
    return InferenceMode.enabled


class inference_mode(_DecoratorContextManager):  # noqa: N801 (PyTorch's name)
    """no_grad, and cheaper (PyTorch's `torch.inference_mode`): tensors made inside are inference tensors,
    which count no in-place changes and record no views, so they can never be saved for backward.

    Even enable_grad inside it records nothing. `inference_mode(False)` inside it turns both off again:
    grad mode on, new tensors normal (PyTorch's InferenceMode guard sets grad mode to `not mode`).
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        if not callable(mode):
            raise TypeError(f"inference_mode: mode must be a bool, got {type(mode).__name__}")
        return cls()(mode)  # bare, as a decorator: @inference_mode

    def __init__(self, mode=True):
        self.mode = mode

    def __enter__(self):
        self.previous = Config.enable_backprop, InferenceMode.enabled
        Config.enable_backprop, InferenceMode.enabled = not self.mode, self.mode
        _count_inference_block(+1)

    def __exit__(self, *exc_info):
        Config.enable_backprop, InferenceMode.enabled = self.previous
        _count_inference_block(-1)

    def clone(self):
        return type(self)(self.mode)


# ----- formulas on arrays (the engine's speed path) ----------------------------------------------------

class _BackwardMode(threading.local):
    """While a backward formula runs on bare arrays, in this thread: True (set by the engine, autograd.engine).

    A backward pass that records no graph of its own (create_graph=False, the common case)
    hands the formulas of the operations that allow it (`Function.formula_on_arrays`) bare
    arrays: the same formula then computes on arrays, with no Variable made and nothing
    recorded, and what it calls (sum_to, reshape, cos, ...) returns arrays too.
    """

    arrays = False


BackwardMode = _BackwardMode()


def set_backward_on_arrays(on):
    """Let backward formulas run on bare arrays in this thread, or stop; returns the previous setting.

    The engine sets it around a formula it hands arrays; a saved tensor's unpack hook, which is the
    user's code, runs with it off (autograd.graph). The hot paths read `BackwardMode.arrays` itself.
    """
    previous = BackwardMode.arrays
    BackwardMode.arrays = on
    return previous


# ----- saved-tensor hooks (step 38) ------------------------------------------------------------------

class _SavedTensorsHooks(threading.local):
    """The (pack_hook, unpack_hook) pairs of the saved_tensors_hooks contexts entered in this thread, innermost
    last (a tuple: each thread starts from the empty one)."""

    stack = ()


SavedTensorsHooks = _SavedTensorsHooks()


@contextlib.contextmanager
def saved_tensors_hooks_entered(pack_hook, unpack_hook):
    """Inside the block, the tensors saved for backward in this thread are packed and unpacked by these hooks."""
    SavedTensorsHooks.stack = (*SavedTensorsHooks.stack, (pack_hook, unpack_hook))
    try:
        yield
    finally:
        SavedTensorsHooks.stack = SavedTensorsHooks.stack[:-1]


def current_saved_tensors_hooks():
    """The innermost (pack_hook, unpack_hook) pair entered in this thread, or None."""
    stack = SavedTensorsHooks.stack
    return stack[-1] if stack else None


# ----- anomaly mode (step 39): one switch for the process, as PyTorch's ------------------------------

_anomaly = {"enabled": False, "check_nan": True}


def is_anomaly_enabled():
    """Whether anomaly mode is on (Function.__call__ and the engine ask at every operation)."""
    return _anomaly["enabled"]


def is_anomaly_check_nan_enabled():
    return _anomaly["check_nan"]


def set_anomaly(enabled, check_nan):
    """Turn anomaly mode on or off; returns the old setting, for `restore_anomaly`."""
    previous = dict(_anomaly)
    _anomaly.update(enabled=enabled, check_nan=check_nan)
    return previous


def restore_anomaly(previous):
    _anomaly.update(previous)


# ----- recomputation (steps 42-47) -------------------------------------------------------------------

class _Recomputation(threading.local):
    """How many recomputations run now in this thread, one inside another."""

    depth = 0


_recomputation = _Recomputation()


def is_recomputing():
    """True while a forward computation runs again for backward."""
    return _recomputation.depth > 0


@contextlib.contextmanager
def recomputing():
    """Inside the block, `is_recomputing()` is True: layers with running state count the batch once (step 45)."""
    _recomputation.depth += 1
    try:
        yield
    finally:
        _recomputation.depth -= 1
