"""Step 58's page: its scenario table and its table of modes equal torch's, the view made inside inference mode
behaves as torch's, the notebook shows grad_mode.py whole, and the .data / .detach() pair behaves as the maths
and torch say."""
import json
import pathlib

import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step

pytestmark = [pytest.mark.step58, pytest.mark.torch]
step = load_step(58)
ROOT = pathlib.Path(__file__).resolve().parent.parent

# What torch.autograd's documentation says of the modes (the "Locally disabling gradient computation" table and
# the inference-mode notes), written out here rather than taken from the page
DOCUMENTED = {
    "grad enabled": {"records a graph": True, "counts versions": True, "views keep their base": True,
                     "may be saved later": True, "inference tensors": False},
    "no_grad": {"records a graph": False, "counts versions": True, "views keep their base": True,
                "may be saved later": True, "inference tensors": False},
    "inference_mode": {"records a graph": False, "counts versions": False, "views keep their base": False,
                       "may be saved later": False, "inference tensors": True},
}


@pytest.mark.parametrize("name", list(step.SCENARIOS))
def test_each_scenario_of_the_page_gives_torchs_outcome(name):
    scenario = step.SCENARIOS[name]
    assert step.outcome(scenario, tinypytorch) == step.outcome(scenario, torch)


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_the_table_of_modes_is_the_documented_one_in_both(fw):
    assert {name: step.probe(fw, mode) for name, mode in step.MODES.items()} == DOCUMENTED
    assert step.mode_table == DOCUMENTED


def test_the_errors_of_the_page_are_torchs_four_inference_errors_its_view_error_and_the_version_error():
    outcomes = {step.outcome(scenario, torch) for scenario in step.SCENARIOS.values()}
    errors = {outcome for outcome in outcomes if outcome.startswith("RuntimeError")}
    assert errors == {
        "RuntimeError: Inference tensors do not track version counter",
        "RuntimeError: Inference tensors cannot be saved for backward",
        "RuntimeError: Inplace update to inference tensor outside InferenceMode is not allowed",
        "RuntimeError: Setting requires_grad=True on inference tensor outside InferenceMode is not allowed",
        "RuntimeError: A view was created in inference mode and is being modified inplace in normal mode",
        "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
        "operation",
    }


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_a_view_made_inside_shares_the_counter_and_may_change_in_place_only_inside(fw):
    base, view = step.view_made_inside(fw)
    assert not view.is_inference() and view.requires_grad
    with fw.inference_mode():
        view.mul_(2)
    assert base._version == view._version == 1
    np.testing.assert_array_equal(np.asarray(base.detach()), [2.0, 4.0, 3.0])
    with pytest.raises(RuntimeError, match="A view was created in inference mode and is being modified inplace"):
        view.mul_(2)


def test_the_page_printed_the_same_view_facts_for_both():
    assert step.view_facts["tinypytorch"] == step.view_facts["torch"]


def test_key_is_the_words_before_the_first_stop_or_colon():
    assert step.key(RuntimeError("one of them: [x] is at version 1. Hint")) == "RuntimeError: one of them"
    assert step.key(ValueError("no stop")) == "ValueError: no stop"


def test_the_page_shows_grad_mode_whole_with_show_code_folded():
    cells = json.loads((ROOT / "notebooks" / "step58.ipynb").read_text())["cells"]
    [cell] = [c for c in cells if "".join(c["source"]).strip() == "show_code(grad_mode)"]
    assert "hide-output" in cell["metadata"]["tags"]
    shown = "".join(cell["outputs"][0]["data"]["text/plain"])
    assert shown.strip() == pathlib.Path(tinypytorch.grad_mode.__file__).read_text().strip()


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_a_change_through_data_gives_the_gradient_of_the_changed_values(fw):
    a = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(step.through_data(fw).detach()), 2 * (a + 1))  # not 2a


@pytest.mark.parametrize("fw", [torch, tinypytorch], ids=lambda fw: fw.__name__)
def test_a_change_through_detach_makes_backward_raise(fw):
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        step.through_detach(fw)
