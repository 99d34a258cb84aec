"""Step 57's page: each of its scenarios (set_grad_enabled as a call, a block and a decorator, nesting, decorated
functions and generators, requires_grad_, a thread) gives torch's outcome, and the rule of the two switches and the
trace of the flag are the ones PyTorch documents."""
import pytest
import torch

import tinypytorch
from steploader import load_step

pytestmark = [pytest.mark.step57, pytest.mark.torch]
step = load_step(57)


@pytest.mark.parametrize("name", list(step.SCENARIOS))
def test_each_scenario_of_the_page_gives_torchs_outcome(name):
    scenario = step.SCENARIOS[name]
    assert step.outcome(scenario, tinypytorch) == step.outcome(scenario, torch)


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_an_operation_records_only_when_grad_mode_is_on_and_an_input_requires_grad(fw):
    # torch.autograd's documentation: "requires_grad ... is only True if at least one input requires grad",
    # and no graph is recorded in no_grad; written out here, not taken from the page
    expected = {(True, True): True, (True, False): False, (False, True): False, (False, False): False}
    assert {(m, r): step.records(fw, m, r) for m in (True, False) for r in (True, False)} == expected
    assert step.rule == expected


def test_the_trace_of_the_flag_follows_the_statements():
    flags = [on for _, _, on, _ in step.trace]
    assert flags == [True, False, True, False, True, False, True]
    assert [records for *_, records in step.trace] == flags  # w requires grad: it records exactly when the mode is on


def test_key_is_the_words_before_the_first_stop_or_colon():
    assert step.key(RuntimeError("one of them: [x] is at version 1. Hint")) == "RuntimeError: one of them"
    assert step.key(ValueError("no stop")) == "ValueError: no stop"


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_a_thread_started_in_no_grad_records(fw):
    assert step.seen_in_a_thread(fw) == {"worker": (True, True), "main": (False, False)}


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_a_set_grad_enabled_call_stays_until_switched_back(fw):
    try:
        fw.set_grad_enabled(False)
        assert not fw.is_grad_enabled()
        assert not (fw.tensor([1.0], requires_grad=True) * 2).requires_grad
    finally:
        fw.set_grad_enabled(True)
    assert fw.is_grad_enabled()
