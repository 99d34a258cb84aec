import gc
import tracemalloc
import weakref

import numpy as np
import pytest
from hypothesis import given

from reference import ADD_SQUARE_EXP, add_square_exp_grads, assert_grads_equal_torch, programs
from steploader import load_step

pytestmark = [pytest.mark.step17, pytest.mark.torch]
step = load_step(17)


def test_outputs_are_weak_references_to_the_output_variables():
    x = step.Variable(np.array(1.0))
    y = step.square(x)
    (ref,) = y.creator.outputs
    assert isinstance(ref, weakref.ref) and ref() is y
    assert y.creator.inputs == (x,)  # inputs stay strong: the backward pass needs them


def test_dropping_the_result_frees_intermediates_and_functions_without_gc(no_collector):
    x = step.Variable(np.array([1.0, 2.0]))
    a = step.square(x)
    y = step.add(step.exp(a), a)
    probes = [weakref.ref(obj) for obj in (a, a.creator, y, y.creator)]
    del a, y
    assert [p() for p in probes] == [None] * 4
    assert x.grad is None and x.data is not None  # the leaf the user holds is untouched


def test_the_step16_arrangement_would_survive_without_gc(no_collector):
    # The control: the same check fails for a function that keeps strong references to its outputs.
    x = step.Variable(np.array(2.0))
    a = step.SquareKeepingOutputs()(x)
    y = step.SquareKeepingOutputs()(a)
    probes = [weakref.ref(a), weakref.ref(a.creator)]
    del a, y
    assert all(p() is not None for p in probes)
    gc.collect()
    assert all(p() is None for p in probes)


def held_bytes_after_dropping(square_function):
    tracemalloc.start()
    try:
        x = step.Variable(np.ones(1_000_000))  # 8 MB
        y = square_function(square_function(square_function(x)))  # 3 more arrays of 8 MB
        del x, y
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_a_dropped_graph_leaves_no_arrays_behind(no_collector):
    assert held_bytes_after_dropping(step.square) < 1e6
    assert held_bytes_after_dropping(lambda v: step.SquareKeepingOutputs()(v)) >= 4 * 8e6


def test_the_steps_measurement_function_reports_32_mb_per_pass_only_for_strong_outputs():
    strong = step.held_after_each_pass(lambda v: step.SquareKeepingOutputs()(v), passes=2)
    weak = step.held_after_each_pass(step.square, passes=2)
    assert [round(b / 1e6) for b in strong] == [32, 64, 0]
    assert [round(b / 1e6) for b in weak] == [0, 0, 0]
    assert gc.isenabled()


def test_an_intermediate_dropped_before_backward_is_kept_alive_by_the_graph():
    x = step.Variable(np.array(2.0))
    a = step.square(x)
    y = step.add(step.square(a), step.square(a))
    del a
    y.backward()
    assert x.grad == 64.0  # 8x^3


@given(programs(ADD_SQUARE_EXP, -1, 1))
def test_random_graphs_with_shared_nodes_still_match_torch(program):
    xs, ts = add_square_exp_grads(step, program)
    assert_grads_equal_torch(xs, ts, rtol=1e-10, atol=1e-12)
