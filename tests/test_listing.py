"""tinypytorch.utils.listing: a step shows package code as it stood at that step.

The listings are checked on a small module written here, whose expected text is spelled out in the test."""
import importlib.util
import inspect
import sys
import textwrap

import pytest

from tinypytorch.core import Function
from tinypytorch.utils.listing import change_since, show_change, show_code, source_at_step

MODULE = '''
class Node:  # step 11
    kind = "op"
    is_view = False  # step 37: views share memory

    def call(self, xs):
        ys = self.forward(xs)
        for x in xs:  # step 37: a view whose base changed is redone
            x.refresh()
        if self.saving:
            # step 35: keep what backward needs
            # (two comment lines above the statement)
            self.keep(ys)
        # steps 20-22: a range is not a tag
        self.count = 1
        for x in xs:
            x.check()  # step 48: one device
        return ys

    def saved(self):  # step 35
        return self._saved

    def fast(self, xs):
        if self.bare:  # speed: no step teaches this
            return xs

        return self.call(xs)

    def ported(self, xs):
        if self.options:  # no step: PyTorch's surface
            return self.options(xs)
        return xs



def broken(x):
    if x:
        pass  # step 40: only statement of the if
    else:
        return 1
'''


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("listing") / "listing_sample.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("listing_sample", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["listing_sample"] = module  # inspect finds a class's source through its module
    spec.loader.exec_module(module)
    return module


def test_without_a_step_the_source_is_the_whole_dedented_source(sample):
    assert source_at_step(sample.Node.call) == textwrap.dedent(inspect.getsource(sample.Node.call))
    assert source_at_step(Function.record, step=104) == textwrap.dedent(inspect.getsource(Function.record))


def test_a_statement_tagged_speed_is_in_no_steps_listing_and_leaves_no_blank_at_the_block_start(sample):
    assert "speed" in source_at_step(sample.Node.fast)
    assert source_at_step(sample.Node.fast, step=104) == "def fast(self, xs):\n    return self.call(xs)\n"
    at_99 = source_at_step(Function.run_plain, step=104)
    assert "BackwardMode" not in at_99 and "on_arrays" not in at_99
    assert "BackwardMode" in source_at_step(Function.run_plain)


def test_a_statement_tagged_no_step_is_in_no_steps_listing(sample):
    assert "no step" in source_at_step(sample.Node.ported)
    assert source_at_step(sample.Node.ported, step=103) == "def ported(self, xs):\n    return xs\n"


def test_later_statements_their_blocks_and_their_comment_lines_are_left_out(sample):
    at_34 = source_at_step(sample.Node.call, step=34)
    at_36 = source_at_step(sample.Node.call, step=36)
    at_37 = source_at_step(sample.Node.call, step=37)
    assert "keep" not in at_34 and "self.keep(ys)" in at_36 and "# (two comment lines" in at_36
    assert "refresh" not in at_36 and "x.refresh()" in at_37
    assert "check" not in at_37 and "for x in xs:\n    x.check()" not in at_37
    assert "# steps 20-22: a range is not a tag\nself.count = 1" in at_34.replace("    ", "")
    # `if self.saving:` lost its only statement at step 34, so it goes too; the emptied `for` as well
    assert "if self.saving" not in at_34 and at_34.count("for x in xs") == 0
    assert at_34 == ("def call(self, xs):\n    ys = self.forward(xs)\n"
                     "    # steps 20-22: a range is not a tag\n    self.count = 1\n    return ys\n")
    assert "is_view" not in source_at_step(sample.Node, step=36) and "is_view = False" in source_at_step(sample.Node, step=37)


def test_something_that_did_not_exist_yet_or_would_not_parse_is_refused(sample):
    with pytest.raises(ValueError, match="Node.saved did not exist at step 34"):
        source_at_step(sample.Node.saved, step=34)
    with pytest.raises(ValueError, match="broken at step 39 is not valid Python"):
        source_at_step(sample.broken, step=39)


def test_function_call_at_step_35_records_and_saves_without_later_steps():
    at_35 = source_at_step(Function.run_plain, step=35)
    assert "self.record(inputs, ys, outputs)" in at_35 and "self.needs_input_grad" in at_35
    assert "refresh_view" not in at_35 and "track_view" not in at_35 and "check_same_device" not in at_35
    assert "refresh_view" in source_at_step(Function.run_plain, step=37)


def test_show_code_prints_outside_jupyter(sample, capsys):
    show_code(sample.Node.saved, step=35)
    assert capsys.readouterr().out == "def saved(self):  # step 35\n    return self._saved\n\n"


# ----- show_change: what a step of stages 1-2 changed in its own framework ------------------------------------

def test_step_14s_change_is_the_accumulation_and_nothing_else():
    """Step 14 changes one assignment in Variable.backward into a first-or-add pair (its page says so)."""
    diff = change_since(14, "Variable.backward").splitlines()
    removed = [line for line in diff if line.startswith("-")]
    added = [line for line in diff if line.startswith("+")]
    assert [line.strip() for line in removed] == ["-            x.grad = as_array(gx)  # 0-d arithmetic gives a "
                                                  "NumPy scalar: keep grads ndarrays like data".strip()]
    assert [line[1:].strip().split("  #")[0] for line in added] == [
        "if x.grad is None:", "x.grad = as_array(gx)", "else:", "x.grad = as_array(x.grad + gx)"]
    assert diff[0] == "@@ Variable.backward: step 13 -> step 14 @@"


def test_an_unchanged_a_new_and_a_missing_definition():
    assert change_since(14, "as_array") == "# as_array: unchanged since step 13\n"
    new = change_since(12, "Add", since=10).splitlines()[1:]  # Add does not exist at step 10: every line added
    assert new and all(line.startswith("+") for line in new) and new[0] == "+class Add(Function):"
    with pytest.raises(ValueError, match="step 14 defines no Nothing"):
        change_since(14, "Nothing")


def test_show_change_prints_outside_jupyter(capsys):
    show_change(14, "as_array")
    assert capsys.readouterr().out == "# as_array: unchanged since step 13\n\n"


def test_a_definition_keeps_its_decorators_and_its_last_lines_comment():
    """Whole lines, from the first decorator to the last line with its end-of-line comment (read in the files)."""
    assert change_since(18, "using_config", since=17).splitlines()[1:3] == [
        "+@contextlib.contextmanager", "+def using_config(name, value):"]
    last = change_since(16, "Variable.backward").rstrip("\n").splitlines()[-1]
    assert last == "+                add_func(x.creator)  # continue towards the leaves"
