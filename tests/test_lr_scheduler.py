"""tinypytorch.optim.lr_scheduler against torch.optim.lr_scheduler: the lrs of 30 epochs written into optimizers
with groups of different lrs, the state dicts and their round trip, resuming, and torch's warnings and errors.
Every expected value is torch's, from the same calls on torch's optimizer."""
import math
import warnings

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Parameter, optim
from tinypytorch.optim import lr_scheduler

pytestmark = pytest.mark.torch

EPOCHS = 30
LRS = (0.1, 0.03)  # two groups with lrs of their own


class Scale:
    """A callable object: LambdaLR saves its attributes in the state dict (a function it leaves out)."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate ** epoch


SCHEDULERS = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[3, 8, 8, 20], gamma=0.3),  # 8 twice: gamma^2
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, gamma=0.9),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lr_lambda=lambda epoch: 1 / (1 + epoch)),
    "LambdaLR-per-group": lambda s, o: s.LambdaLR(o, lr_lambda=[lambda epoch: 0.95 ** epoch, Scale(0.8)]),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=10),  # 30 epochs: down, up, down again
    "CosineAnnealingLR-eta_min": lambda s, o: s.CosineAnnealingLR(o, T_max=7, eta_min=0.005),
}


def optimizers():
    """An SGD of each framework with two groups of different lrs."""
    ours = optim.SGD([{"params": [Parameter(np.ones(2))]}, {"params": [Parameter(np.ones(1))], "lr": LRS[1]}],
                     lr=LRS[0], momentum=0.9)
    theirs = torch.optim.SGD([{"params": [torch.ones(2, requires_grad=True)]},
                              {"params": [torch.ones(1, requires_grad=True)], "lr": LRS[1]}], lr=LRS[0], momentum=0.9)
    return ours, theirs


def train_epoch(optimizer):
    """One optimizer step, with a gradient for every parameter."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p) if isinstance(p, torch.Tensor) else tinypytorch.ones_like(p)
    optimizer.step()


def run(scheduler, optimizer, epochs):
    """The lrs of each epoch, as get_last_lr() and the groups see them, stepping in torch's order."""
    seen = []
    for _ in range(epochs):
        train_epoch(optimizer)
        scheduler.step()
        seen.append((scheduler.get_last_lr(), [g["lr"] for g in optimizer.param_groups]))
    return seen


@pytest.mark.parametrize("name", SCHEDULERS)
def test_thirty_epochs_of_lrs_equal_torchs_exactly(name):
    ours, theirs = optimizers()
    sched, sched_t = SCHEDULERS[name](lr_scheduler, ours), SCHEDULERS[name](torch.optim.lr_scheduler, theirs)
    assert sched.get_last_lr() == sched_t.get_last_lr()  # epoch 0, the constructor's step
    assert [g["initial_lr"] for g in ours.param_groups] == [g["initial_lr"] for g in theirs.param_groups]
    assert run(sched, ours, EPOCHS) == run(sched_t, theirs, EPOCHS)  # the recursive formulas, bit for bit
    assert sched.last_epoch == sched_t.last_epoch == EPOCHS
    assert sched.state_dict() == sched_t.state_dict()


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_state_dict_round_trip_resumes_the_schedule_as_torchs(name):
    """Ten epochs; then a new optimizer and scheduler load both state dicts and go on for twenty: torch's lrs, in
    torch's order of loading (the scheduler made before the optimizer's state is loaded)."""
    ours, theirs = optimizers()
    sched, sched_t = SCHEDULERS[name](lr_scheduler, ours), SCHEDULERS[name](torch.optim.lr_scheduler, theirs)
    run(sched, ours, 10)
    run(sched_t, theirs, 10)
    saved, saved_opt = sched.state_dict(), ours.state_dict()
    ours2, theirs2 = optimizers()
    sched2 = SCHEDULERS[name](lr_scheduler, ours2)
    sched2_t = SCHEDULERS[name](torch.optim.lr_scheduler, theirs2)
    ours2.load_state_dict(saved_opt)
    theirs2.load_state_dict(theirs.state_dict())
    sched2.load_state_dict(saved)
    sched2_t.load_state_dict(sched_t.state_dict())
    assert sched2.state_dict() == sched2_t.state_dict()
    resumed = run(sched2, ours2, 20)
    assert resumed == run(sched2_t, theirs2, 20)
    assert resumed == run(sched, ours, 20)  # the same as the uninterrupted schedule


def test_lambda_lr_saves_a_callable_objects_attributes_not_a_functions():
    ours, theirs = optimizers()
    sched = SCHEDULERS["LambdaLR-per-group"](lr_scheduler, ours)
    sched_t = SCHEDULERS["LambdaLR-per-group"](torch.optim.lr_scheduler, theirs)
    assert sched.state_dict()["lr_lambdas"] == sched_t.state_dict()["lr_lambdas"] == [None, {"rate": 0.8}]
    state = sched.state_dict()
    state["lr_lambdas"][1]["rate"] = 0.5
    sched.load_state_dict(state)
    assert sched.lr_lambdas[1].rate == 0.5 and "lr_lambdas" in state  # the caller's dict is left whole


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR"])
def test_resuming_with_last_epoch_equals_torchs(name):
    """A scheduler made with last_epoch=k (the groups hold initial_lr from a checkpoint) goes on as torch's."""
    make = {"StepLR": lambda s, o: s.StepLR(o, 4, gamma=0.5, last_epoch=9),
            "MultiStepLR": lambda s, o: s.MultiStepLR(o, [5, 12], last_epoch=9),
            "ExponentialLR": lambda s, o: s.ExponentialLR(o, 0.9, last_epoch=9),
            "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=6, last_epoch=9)}[name]
    ours, theirs = optimizers()
    for optimizer in (ours, theirs):
        for group in optimizer.param_groups:
            group["initial_lr"] = group["lr"] * 2
    sched, sched_t = make(lr_scheduler, ours), make(torch.optim.lr_scheduler, theirs)
    assert sched.get_last_lr() == sched_t.get_last_lr()
    assert run(sched, ours, 12) == run(sched_t, theirs, 12)


def test_resuming_without_initial_lr_raises_torchs_key_error():
    ours, theirs = optimizers()
    with pytest.raises(KeyError) as caught:
        torch.optim.lr_scheduler.StepLR(theirs, 3, last_epoch=4)
    with pytest.raises(KeyError) as ours_caught:
        lr_scheduler.StepLR(ours, 3, last_epoch=4)
    assert str(ours_caught.value) == str(caught.value)


def test_an_lr_changed_by_hand_carries_on_in_the_recursive_schedules_as_in_torch():
    ours, theirs = optimizers()
    sched = lr_scheduler.CosineAnnealingLR(ours, T_max=12)
    sched_t = torch.optim.lr_scheduler.CosineAnnealingLR(theirs, T_max=12)
    run(sched, ours, 4)
    run(sched_t, theirs, 4)
    for optimizer in (ours, theirs):
        optimizer.param_groups[1]["lr"] *= 3
    assert run(sched, ours, 20) == run(sched_t, theirs, 20)


def test_cosine_annealing_matches_the_closed_form_to_rounding_as_torchs_does():
    ours, _ = optimizers()
    sched = lr_scheduler.CosineAnnealingLR(ours, T_max=10, eta_min=0.001)
    for epoch, (lrs, _) in enumerate(run(sched, ours, EPOCHS), 1):
        closed = [0.001 + (lr - 0.001) * (1 + math.cos(math.pi * epoch / 10)) / 2 for lr in LRS]
        np.testing.assert_allclose(lrs, closed, rtol=1e-12, atol=1e-15)


# ----- torch's warnings -----------------------------------------------------------------------------------

def messages(record):
    return [str(w.message) for w in record]


def test_stepping_the_scheduler_before_the_optimizer_warns_as_torch():
    for make_optimizers, module in ((lambda: optimizers()[0], lr_scheduler),
                                    (lambda: optimizers()[1], torch.optim.lr_scheduler)):
        optimizer = make_optimizers()
        sched = module.StepLR(optimizer, 3)
        with pytest.warns(UserWarning, match=r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`") \
                as record:
            sched.step()
        if module is lr_scheduler:
            ours = messages(record)
        else:
            assert messages(record) == ours


def test_the_right_order_gives_no_warning_in_either():
    for optimizer, module in zip(optimizers(), (lr_scheduler, torch.optim.lr_scheduler)):
        sched = module.ExponentialLR(optimizer, 0.9)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run(sched, optimizer, 3)


def test_an_optimizer_step_replaced_after_the_scheduler_warns_as_torch():
    record_of = []
    for optimizer, module in zip(optimizers(), (lr_scheduler, torch.optim.lr_scheduler)):
        sched = module.StepLR(optimizer, 3)
        optimizer.step = lambda: None  # a wrapper of the user's own, put after the scheduler
        with pytest.warns(UserWarning, match="Seems like `optimizer.step\\(\\)` has been overridden") as record:
            sched.step()
        record_of.append(messages(record))
    assert record_of[0] == record_of[1]


def test_get_lr_outside_step_and_step_with_an_epoch_warn_as_torch():
    results = []
    for optimizer, module in zip(optimizers(), (lr_scheduler, torch.optim.lr_scheduler)):
        sched = module.StepLR(optimizer, 3, gamma=0.5)
        train_epoch(optimizer)
        with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`") as got_lr:
            sched.get_lr()
        with pytest.warns(UserWarning, match="The epoch parameter in `scheduler.step\\(\\)`") as stepped:
            sched.step(7)  # the closed form: gamma^(7 // 3)
        results.append((messages(got_lr), messages(stepped), sched.get_last_lr(), sched.last_epoch))
    assert results[0] == results[1]


def test_a_scheduler_refuses_what_is_not_an_optimizer_as_torch():
    with pytest.raises(TypeError, match="^list is not an Optimizer$"):
        torch.optim.lr_scheduler.StepLR([], 3)
    with pytest.raises(TypeError, match="^list is not an Optimizer$"):
        lr_scheduler.StepLR([], 3)
    with pytest.raises(TypeError, match="^SGD is not an Optimizer$"):  # torch's optimizer is not ours
        lr_scheduler.StepLR(optimizers()[1], 3)


def test_lambda_lr_with_the_wrong_number_of_functions_raises_torchs_value_error():
    for optimizer, module in zip(optimizers(), (lr_scheduler, torch.optim.lr_scheduler)):
        with pytest.raises(ValueError, match="^Expected 2 lr_lambdas, but got 3$"):
            module.LambdaLR(optimizer, [lambda e: 1.0] * 3)


def test_the_scheduler_module_has_torchs_paths_and_signatures():
    import importlib
    import inspect

    assert importlib.import_module("tinypytorch.optim.lr_scheduler") is lr_scheduler is optim.lr_scheduler
    from tinypytorch.optim.lr_scheduler import StepLR  # noqa: F401 (the form PyTorch programs write)
    for name in lr_scheduler.__all__:
        ours, theirs = getattr(lr_scheduler, name), getattr(torch.optim.lr_scheduler, name)
        torch_parameters = inspect.signature(theirs).parameters
        for pname, parameter in inspect.signature(ours).parameters.items():
            assert pname in torch_parameters, (name, pname)
            assert parameter.default == torch_parameters[pname].default, (name, pname)
        assert list(inspect.signature(ours).parameters) == list(torch_parameters), name


def test_a_pytorch_training_loop_with_a_scheduler_runs_with_its_imports_renamed():
    def loop(torch_or_tinypytorch, start):
        w = torch_or_tinypytorch.tensor(start, requires_grad=True)
        optimizer = torch_or_tinypytorch.optim.Adam([w], lr=0.1)
        scheduler = torch_or_tinypytorch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
        for _ in range(15):
            optimizer.zero_grad()
            loss = ((w - 3.0) ** 2).sum()
            loss.backward()
            optimizer.step()
            scheduler.step()
        return w.detach().numpy()

    start = np.array([0.5, -1.0])
    np.testing.assert_allclose(loop(tinypytorch, start), loop(torch, start), rtol=1e-6)
