# One-command set-up: every target creates .venv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

.PHONY: run test check-without-dot notebooks book bench lab clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("tinypytorch needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

## run: every step script in order, then a table of what each checked against PyTorch
run: $(STAMP)
	$(PY) tools/run_steps.py

## test: unit and PyTorch reference tests, then every notebook re-executed and compared (nbval)
test: $(STAMP)
	$(PY) -m pytest tests notebooks $(NBVAL)

## check-without-dot: the steps that draw graphs, as a machine without Graphviz runs them (dot hidden
## from PATH): their scripts, their tests, and their notebooks compared by nbval
GRAPH_STEPS := $(sort $(basename $(notdir $(shell grep -l -E 'plot_dot_graph|DotGraph' steps/step[0-9][0-9].py))))
check-without-dot: $(STAMP)
	$(PY) tools/without_dot.py $(PY) tools/run_steps.py $(GRAPH_STEPS)
	$(PY) tools/without_dot.py $(PY) -m pytest -q $(GRAPH_STEPS:%=tests/test_%.py) $(GRAPH_STEPS:%=notebooks/%.ipynb) $(NBVAL)

## notebooks: regenerate notebooks/stepNN.ipynb from steps/stepNN.py and execute them
notebooks: $(STAMP)
	$(PY) tools/notebooks.py

## book: the HTML book in book/_build/html, from the committed notebook outputs
book: $(STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html book book/_build/html
	@echo "book: book/_build/html/index.html"

## bench: speed of tinypytorch vs PyTorch vs hand-written NumPy, into bench/results/
bench: $(STAMP)
	$(PY) bench/bench_autograd.py

## lab: Jupyter Lab on the notebooks
lab: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check jupyterlab
	$(PY) -m jupyter lab notebooks

clean:
	rm -rf $(VENV) book/_build book/notebooks .pytest_cache .hypothesis
