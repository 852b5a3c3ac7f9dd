# mha-course: `make lab` to learn, `make test` to check everything.
# Windows without make: see README ("Windows").

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Which torch to install. Any release >= 2.5 works; CI pins one too (.ci/run).
# TORCH_INDEX=auto (the default, tools/torch_index.py): Linux without an NVIDIA driver gets the CPU
# build from https://download.pytorch.org/whl/cpu (falling back to the default index, with a
# one-line message, when that cannot be reached); a GPU machine, macOS and Windows get the default
# index's build (CUDA on Linux). TORCH_INDEX=URL picks an index, TORCH_INDEX= the default one.
TORCH_SPEC ?= torch>=2.5
TORCH_INDEX ?= auto
# The learner install (`make lab`): the course, JupyterLab, what the chapters need, and EXTRAS:
# triton (chapter 17's kernels, run on CPU in Triton's interpreter; about 1 GB) and hf (chapter
# 20: transformers). Without chapter 17's kernels: make lab EXTRAS=hf
# The maintainer install (`make test` and the other targets below) adds the dev extra (tests,
# linters, Playwright, nbgrader) to the same venv.
EXTRAS ?= triton,hf
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: lab test setup unit notebooks lint release exercises clean help browser site

help:
	@echo "make lab    - set up (once) and open JupyterLab at the course start page"
	@echo "make test   - set up (once) and run the whole suite (lint, package, grading, notebooks)"
	@echo "make release - regenerate exercises/ from solutions/"
	@echo "make browser - run every lecture notebook in JupyterLab in headless Chromium (needs chromium)"
	@echo "make site   - build the static course into _site/, check its links and render it in Chromium"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	idx="$$($(BIN)/python tools/torch_index.py "$(TORCH_INDEX)")" && \
	  $(BIN)/python -m pip install "$(TORCH_SPEC)" $${idx:+--index-url "$$idx"}
	$(BIN)/python -m pip install -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	$(BIN)/python -m ipykernel install --user --name mha-course --display-name "Python (mha-course)"
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e ".[dev$(if $(EXTRAS),$(comma)$(EXTRAS))]"
	touch $(DEV_STAMP)

# `make site`: the site extra (Pagefind, Playwright) only, never the dev extra: the venv is the
# learner's too, and dev's nbgrader adds its menus and "Validate" button to the Lab.
SITE_STAMP := $(VENV)/.installed-site
$(SITE_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e ".[site$(if $(EXTRAS),$(comma)$(EXTRAS))]"
	touch $(SITE_STAMP)

comma := ,
# The maintainer install (what `make test` needs); `make lab` installs only the learner's part.
setup: $(DEV_STAMP)

# The Lab's command line (the repository root as its root, the venv first on PATH) is
# tools/lab.py's; the browser test starts the Lab with it too.
lab: $(STAMP)
	$(BIN)/python tools/lab.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Both suites on two workers by default (what CI runs): --dist loadfile keeps a test file, or a
# notebook's cells, on one worker, so each module's expensive fixture is computed once.
UNIT_ARGS ?= -n 2 --dist loadfile
NB_ARGS ?= -n 2 --dist loadfile

unit: $(DEV_STAMP)
	$(BIN)/python -m pytest tests -m "not browser" $(UNIT_ARGS)

notebooks: $(DEV_STAMP)
	$(BIN)/python -m pytest --nbval notebooks --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NB_ARGS)

release: $(DEV_STAMP)
	$(BIN)/mha-course release

test: lint unit notebooks
	d=$$(mktemp -d); $(BIN)/mha-course bench --quick --out $$d/bench.json; s=$$?; rm -rf $$d; exit $$s
# `mha-course release --check` runs once, in the unit run (tests/grading/test_stubs.py), not again here.

# Real JupyterLab in headless Chromium (the OS package; nothing downloads a browser). -rA prints
# each notebook's line (its time, cells, figures, Run All clicks and any stall seen) when it passes too.
browser: $(DEV_STAMP)
	$(BIN)/python -m pytest tests/browser -m browser -p no:cacheprovider -rA

# Static HTML course from the committed outputs (nbconvert), then its link and image check.
site: $(SITE_STAMP)
	$(BIN)/python tools/build_site.py
	$(BIN)/python tools/check_site.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis _site test-artifacts
