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
