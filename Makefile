# One-command set-up: every target creates .venv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg
# One worker per CPU, each taking whole files: a notebook's cells share one kernel, so they must stay together.
PARALLEL := -n auto --dist loadfile

.PHONY: run test fuzz check-without-dot check-other-cpu check-last-ulp notebooks book check-book pages bench bench-gpu \
	bench-changes mutants lab workbook grade clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("tinypytorch needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

## run: every step script in order, then a table of what each checked against PyTorch
run: $(STAMP)
	$(PY) tools/run_steps.py

## test: unit and PyTorch reference tests, then every notebook re-executed and compared (nbval); hypothesis draws
## the same examples on every machine and every run
test: $(STAMP)
	$(PY) -m pytest $(PARALLEL) tests notebooks $(NBVAL)

## fuzz: the unit tests with new hypothesis examples on every run, five times as many (failures are kept in
## .hypothesis/ and tried first next time): for whoever looks for the next input that breaks a test
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest $(PARALLEL) tests

## check-without-dot: the steps that draw graphs, as a machine without Graphviz runs them (dot hidden
## from PATH): their scripts, their tests, and their notebooks compared by nbval
GRAPH_STEPS := $(sort $(basename $(notdir $(shell grep -l -E 'plot_dot_graph|DotGraph' steps/step[0-9][0-9].py))))
check-without-dot: $(STAMP)
	$(PY) tools/without_dot.py $(PY) tools/run_steps.py $(GRAPH_STEPS)
	$(PY) tools/without_dot.py $(PY) -m pytest $(PARALLEL) -q $(GRAPH_STEPS:%=tests/test_%.py) $(GRAPH_STEPS:%=notebooks/%.ipynb) $(NBVAL)

## check-other-cpu: every notebook re-executed and compared (nbval) with the arithmetic kernels of an
## older CPU: OpenBLAS's Sandy Bridge kernels on one thread, NumPy without its AVX2 and AVX-512 code, torch's
## plainest kernels (those of processors other than x86 too) and MKL's most compatible matrix products.
## Outputs that depend on summation order or on the last bit of exp, pow or a matrix product show here.
OTHER_CPU := OPENBLAS_CORETYPE=Sandybridge OPENBLAS_NUM_THREADS=1 NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL" \
	ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
check-other-cpu: $(STAMP)
	$(OTHER_CPU) $(PY) -m pytest $(PARALLEL) -q -p no:cacheprovider notebooks $(NBVAL)

## check-last-ulp: the tests and notebooks again with torch's last bit as another CPU's kernels may round it
## (tools/last_ulp.py moves every other element of sqrt, exp, tanh, ... by one ulp): finds comparisons of two
## libraries that only hold on the CPU where they were written
check-last-ulp: $(STAMP)
	PYTHONPATH=tools $(PY) -m pytest $(PARALLEL) -q -p last_ulp tests
	$(PY) tools/last_ulp.py $(PY) -m pytest $(PARALLEL) -q -p no:cacheprovider notebooks $(NBVAL) \
		--ignore notebooks/step42.ipynb  # torch checked against itself after a recomputation the mode cannot reach

## notebooks: regenerate notebooks/stepNN.ipynb from steps/stepNN.py and execute them
notebooks: $(STAMP)
	$(PY) tools/notebooks.py

## book: the HTML book in book/_build/html, from the committed notebook outputs
book: $(STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html book book/_build/html
	@echo "book: book/_build/html/index.html"

## check-book: the built book opened in headless Chromium with the network off: every page's maths typeset, and
## every page at most 12,000 px tall at 1280 px
check-book: book
	$(PY) tools/check_book.py book/_build/html
	$(PY) tools/pages.py --check --html book/_build/html

## pages: the steps' pages as a learner meets them: visible code and markdown lines, figures, recap
## and exercises, and each page's height in the built book at 1280 px (headless Chromium); SHOTS=dir for screenshots
pages: book
	$(PY) tools/pages.py $(if $(SHOTS),--shots $(SHOTS))

## bench: speed of tinypytorch vs DeZero (if installed: bench/requirements-peers.txt) vs PyTorch vs hand-written
## NumPy, and memory vs PyTorch, into bench/results/
bench: $(STAMP)
	$(PY) bench/bench_autograd.py
	$(PY) bench/bench_memory.py

## bench-gpu: tinypytorch on CuPy against PyTorch CUDA and hand-written CuPy, on one GPU (bench/results/gpu.md;
## needs an NVIDIA GPU and pip install -e .[gpu]; without a GPU it says so and writes nothing)
bench-gpu: $(STAMP)
	$(PY) bench/bench_gpu.py

## bench-changes: what the speed changes save, the package at commit BEFORE against this one (bench/results/changes.md;
## the default is the package before the backward formulas ran on arrays; a3f72d5: before every speed change)
BEFORE ?= a4e1187
bench-changes: $(STAMP)
	before=$$(mktemp -d) && git archive $(BEFORE) tinypytorch | tar -x -C $$before && \
	$(PY) bench/bench_changes.py --before $$before; status=$$?; rm -rf $$before; exit $$status

## mutants: put one plausible bug at a time into a copy of the package and report which the tests miss (not in CI)
mutants: $(STAMP)
	$(PY) tools/mutants.py

## lab: Jupyter Lab on the notebooks
lab: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check jupyterlab
	$(PY) -m jupyter lab notebooks

## workbook: write workbook/ (git-ignored), your copy of steps/ and tinypytorch/ in which the code each step of 01-34
## introduces is a stub to fill in; never written over (the book's page "How to use this book")
WORKBOOK ?= workbook
workbook: $(STAMP)
	$(PY) tools/workbook.py build --into $(WORKBOOK)

## grade: STEP=NN runs step NN's own tests (PyTorch checks included) on your code in workbook/: how many pass, and the
## first line of each failing test's error (a stub's says what is still to write)
grade: $(STAMP)
	@test -n "$(STEP)" || { echo "usage: make grade STEP=NN (a step from 01 to 34)"; exit 2; }
	$(PY) tools/workbook.py grade $(STEP) --workbook $(WORKBOOK)

clean:
	rm -rf $(VENV) book/_build book/notebooks .pytest_cache .hypothesis
