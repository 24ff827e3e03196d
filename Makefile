# One target per thing a person does; `make help` lists them.
# Every tool runs from the project virtual environment ($(VENV)), built by `make install`.

VENV    := .venv
BIN     := $(VENV)/bin
PY      := $(BIN)/python
STAMP   := $(VENV)/.installed
HTML    := _build/html
# MathJax for the book, copied from the pinned `django-static-mathjax` wheel so that the
# built HTML typesets math without any network access (see mathjax_path in _config.yml).
MATHJAX := book/_static/mathjax
KERNEL  := $(VENV)/share/jupyter/kernels/python3/kernel.json
TORCH   := 2.13.0
PORT    ?= 8000
# Notebooks run the same way for nbval and `make notebooks`: inline figures (no MPLBACKEND), fixed
# hashing, and single-threaded OpenBLAS (same summation order everywhere, no oversubscription).
NBENV   := env -u MPLBACKEND PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1

SHELL       := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# `make test` runs its steps in order and stops at the first failure, even under -j.
.NOTPARALLEL:
.DELETE_ON_ERROR:

.PHONY: help install lint unit nbval book browser test notebooks serve bench clean constraints

help:  ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(BIN)/pip install -c constraints.txt -e '.[dev]'
	touch $@

install: $(STAMP)  ## create .venv and install kvtutor[dev] with the pinned versions

lint: $(STAMP)  ## ruff check and ruff format --check (src, tests, book, notebooks)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: $(STAMP)  ## unit, property and parity tests (everything but tests/browser)
	$(BIN)/pytest tests --ignore=tests/browser

# Run from inside book/ so that copies under _build/ can never be collected.
nbval: $(STAMP)  ## re-run every chapter and compare with its stored outputs (strict nbval)
	cd book && $(NBENV) $(abspath $(BIN))/pytest --nbval --nbval-current-env \
	  --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider .

$(MATHJAX)/tex-mml-chtml.js: $(STAMP)
	rm -rf $(MATHJAX)
	mkdir -p $(MATHJAX)/output
	src=$$($(PY) -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__file__).parent / "static" / "mathjax")'); \
	  cp "$$src/LICENSE" $(MATHJAX)/; \
	  cp -r "$$src/es5/input" "$$src/es5/ui" "$$src/es5/a11y" "$$src/es5/sre" $(MATHJAX)/; \
	  cp -r "$$src/es5/output/chtml" $(MATHJAX)/output/; \
	  cp "$$src/es5/tex-mml-chtml.js" $@

book: $(STAMP) $(MATHJAX)/tex-mml-chtml.js  ## build the HTML book into _build/html (strict: warnings fail)
	$(BIN)/jupyter-book build . --all -W -n --keep-going

browser: book  ## open every chapter in headless Chromium and check it (needs Debian's chromium)
	$(BIN)/pytest tests/browser

test: lint unit nbval book browser  ## everything CI runs, in order, stopping at the first failure

$(KERNEL): $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name 'Python 3 (ipykernel)'

notebooks: $(KERNEL)  ## re-execute every book/*.ipynb in place and store the outputs
	$(NBENV) JUPYTER_PREFER_ENV_PATH=1 $(BIN)/jupyter nbconvert \
	  --to notebook --execute --inplace --ExecutePreprocessor.kernel_name=python3 \
	  --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.store_widget_state=False book/*.ipynb
	$(PY) tools/clean_outputs.py book/*.ipynb

serve:  ## serve the built book on http://127.0.0.1:$(PORT)/ (after `make book`)
	@test -f $(HTML)/index.html || { echo "no $(HTML)/index.html: run 'make book' first" >&2; exit 1; }
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory $(HTML)

bench: $(STAMP)  ## measure this machine and record book/data/bench-cpu.json
	$(PY) -m kvtutor bench --size full --out book/data/bench-cpu.json

# Pins the CPU torch wheel; without the pin pip resolves the multi-GB CUDA build.
constraints:  ## re-pin constraints.txt from a fresh throwaway venv
	rm -rf _build/freeze-venv
	python3 -m venv _build/freeze-venv
	_build/freeze-venv/bin/pip install -e '.[dev]' 'torch==$(TORCH)'
	{ sed -n '/^#/p' constraints.txt; \
	  _build/freeze-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' \
	    | sed 's/^torch==$(TORCH)+cpu$$/torch==$(TORCH)/'; \
	} > _build/constraints.txt
	mv _build/constraints.txt constraints.txt
	rm -rf _build/freeze-venv

clean:  ## remove build outputs and caches (keeps .venv)
	rm -rf _build $(MATHJAX) .pytest_cache .hypothesis .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
