"""nbval settings for the step notebooks."""


def pytest_collectstart(collector):
    # SVG (graphviz) embeds version strings and layout noise; PNG is already skipped by nbval.
    if collector.path is not None and collector.path.suffix == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "application/javascript")


def pytest_collection_modifyitems(items):
    # `pytest -m step07 --nbval notebooks` runs that step's notebook along with its tests.
    import pytest

    for item in items:
        stem = item.path.stem
        if item.path.suffix == ".ipynb" and stem.startswith("step"):
            item.add_marker(getattr(pytest.mark, stem))


def _start_kernels_with_one_retry():
    # A kernel can die before its first reply when two workers start kernels at once (jupyter_client picks its TCP
    # ports by binding and releasing them, so two can pick the same): an infrastructure failure, not the notebook's.
    # One more start tells them apart; a notebook whose kernel cannot start fails twice, and is reported.
    import nbval.kernel

    start = nbval.kernel.start_new_kernel

    def start_once_more_if_it_died(*args, **kwargs):
        try:
            return start(*args, **kwargs)
        except RuntimeError:
            return start(*args, **kwargs)

    nbval.kernel.start_new_kernel = start_once_more_if_it_died


_start_kernels_with_one_retry()
