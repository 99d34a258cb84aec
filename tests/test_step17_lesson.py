"""Step 17's lesson: what the picture reads (strong rings in step 16's arrangement, weak outputs now), no stray
output on the page, and the exercises' solutions (a tree with weak parent links, weak inputs) checked with the
collector off and against PyTorch."""
import json
import pathlib
import weakref

import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step17, pytest.mark.torch]
step = load_step(17)
NOTEBOOK = pathlib.Path(__file__).resolve().parent.parent / "notebooks" / "step17.ipynb"


def test_the_picture_reads_rings_for_step16_and_weak_outputs_now():
    x = step.Variable(np.array(2.0))
    y = step.square(step.square(x))
    assert sorted(kind for _, _, kind in step.links(y)) == ["creator"] * 2 + ["inputs"] * 2 + ["outputs, weak"] * 2
    x = step.Variable(np.array(2.0))
    y = step.SquareKeepingOutputs()(step.SquareKeepingOutputs()(x))
    assert sorted(kind for _, _, kind in step.links(y)) == ["creator"] * 2 + ["inputs"] * 2 + ["outputs"] * 2


def test_the_page_prints_no_stray_value():
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    assert not [o for c in cells for o in c["outputs"] if o["output_type"] == "execute_result"]


def test_a_tree_with_weak_parent_links_is_freed_without_the_collector(no_collector):
    root = step.TreeNode()
    child = step.TreeNode(root)
    grandchild = step.TreeNode(child)
    assert child.parent is root and grandchild.parent is child and root.parent is None
    assert root.children == [child] and child.children == [grandchild]
    probes = [weakref.ref(node) for node in (root, child, grandchild)]
    del root, child, grandchild
    assert [p() for p in probes] == [None] * 3


def test_a_child_outlives_its_parent_and_then_has_none(no_collector):
    root = step.TreeNode()
    child = step.TreeNode(root)
    root.children.clear()
    del root
    assert child.parent is None


def test_weak_inputs_lose_the_intermediate_that_backward_needs():
    x = step.Variable(np.array(2.0))
    a = step.SquareWeakInputs()(x)
    y = step.SquareWeakInputs()(a)
    del a
    with pytest.raises(AttributeError, match="NoneType"):
        y.backward()


def test_weak_inputs_still_agree_with_torch_while_the_intermediate_is_held():
    x = step.Variable(np.array(1.5))
    a = step.SquareWeakInputs()(x)
    y = step.SquareWeakInputs()(a)
    y.backward()
    xt = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    ((xt**2) ** 2).backward()
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-12)
    assert a.grad is not None
