# One target per thing a person does; `make help` lists them.
# Every tool runs from the project virtual environment ($(VENV)), built by `make install`.

# The interpreter that creates .venv: `make install PYTHON=python3.13` picks another one.
PYTHON  ?= python3
PY_MIN  := 3.11
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
# Where torch comes from. Default: PyTorch's CPU wheels (a few hundred MB; on Linux, PyPI's torch is
# the multi-GB CUDA build). `make install TORCH_INDEX=https://download.pytorch.org/whl/cu130` picks
# a CUDA build, `TORCH_INDEX=` pip's own sources only. An index that does not answer within 10 s is
# skipped with a note (pip would retry it for minutes, once per package, on a machine offline).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PORT    ?= 8000
# The unit tests, nbval and `make standalone` run on every core; JOBS=1 runs each in one process.
JOBS    ?= auto
# Notebooks run the same way for nbval and `make notebooks`: inline figures (no MPLBACKEND), fixed
# hashing, and single-threaded OpenBLAS (same summation order everywhere, no oversubscription).
NBENV   := env -u MPLBACKEND PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1
# The gate (nbval, standalone) runs each chapter's "on your machine" timing cells at the unit tests'
# tiny sizes: the same code, whose outputs nbval ignores (they are timings), in seconds instead of
# a minute. `make notebooks` runs them at the reader's sizes, and stores what they print.
GATEENV := KVTUTOR_BENCH_SIZE=tiny
# ... and the Chinese edition complete: a word of a figure or a printed table with no Chinese in
# kvtutor/book/labels.py, or no CJK font to draw it, is an error (kvtutor.book.editions). A reader's
# run (`make standalone`, Colab) is not strict: it draws what it cannot translate in English.
STRICT_ZH := KVTUTOR_STRICT_ZH=1

SHELL       := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# `make test` runs its steps in order and stops at the first failure, even under -j.
.NOTPARALLEL:
.DELETE_ON_ERROR:

.PHONY: help install lint unit nbval standalone book font chromium browser test notebooks serve bench clean \
	distclean constraints i18n-update

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/\$$(PORT)/$(PORT)/g' \
	  | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# The stamp is written last, only when everything installed: a .venv without it is a failed or
# interrupted install, and is recreated from scratch rather than trusted.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < tuple(map(int, "$(PY_MIN)".split("."))))' 2>/dev/null \
	  || { echo "kvtutor needs Python >= $(PY_MIN), and '$(PYTHON)' is" \
	       "$$($(PYTHON) -V 2>/dev/null || echo 'not found'): run e.g. 'make install PYTHON=python3.12'" >&2; \
	       exit 1; }
	@test -f $@ || { \
	  if [ -e $(VENV) ]; then echo "$(VENV) has no $(notdir $@) (an install failed or was stopped): recreating it"; fi; \
	  rm -rf $(VENV); echo "$(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	$(call install_torch,$(BIN))
	$(BIN)/pip install --no-compile -c constraints.txt -e '.[dev]'
	touch $@

# $(call install_torch,BIN): torch into the venv of BIN from TORCH_INDEX when that answers, else
# (with a note) from pip's own sources when the next install asks for it.
define install_torch
	@if [ -n "$(TORCH_INDEX)" ] && $(1)/python -c 'import sys, urllib.request as u; \
	      u.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10).close()' '$(TORCH_INDEX)' 2>/dev/null; \
	then \
	  echo "$(1)/pip install --no-compile -c constraints.txt --extra-index-url $(TORCH_INDEX) torch"; \
	  $(1)/pip install --no-compile -c constraints.txt --extra-index-url '$(TORCH_INDEX)' torch; \
	elif [ -n "$(TORCH_INDEX)" ]; then \
	  echo "note: $(TORCH_INDEX) is unreachable: torch comes from pip's own sources" \
	       "(on Linux, PyPI's torch is the CUDA build; see TORCH_INDEX in the Makefile)" >&2; \
	fi
endef

# A reader's environment, as in Colab or Binder: kvtutor[notebooks] and a kernel, none of the book's
# tools (no Jupyter Book, myst-nb, Sphinx or nbval), kvtutor installed from the sources, not editable.
READER  := _build/reader-venv
$(READER)/.installed: pyproject.toml constraints.txt $(STAMP)
	rm -rf $(READER)
	$(PYTHON) -m venv $(READER)
	$(call install_torch,$(READER)/bin)
	$(READER)/bin/pip install --quiet --no-compile -c constraints.txt '.[notebooks]' ipykernel nbclient
	touch $@

install: $(STAMP)  ## create .venv and install kvtutor[dev] with the pinned versions

lint: $(STAMP)  ## ruff check and ruff format --check (src, tests, book, notebooks)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: $(STAMP)  ## unit, property and parity tests (everything but tests/browser)
	$(BIN)/pytest -n $(JOBS) tests --ignore=tests/browser

# Run from inside book/ so that copies under _build/ can never be collected. A notebook's cells
# share one kernel, so `--dist loadfile` keeps each notebook in one worker, in order.
nbval: $(STAMP) font  ## re-run every chapter and compare with its stored outputs (strict nbval)
	cd book && $(NBENV) $(GATEENV) $(STRICT_ZH) $(abspath $(BIN))/pytest --nbval --nbval-current-env \
	  --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider -n $(JOBS) --dist loadfile .

$(MATHJAX)/tex-mml-chtml.js: $(STAMP)
	rm -rf $(MATHJAX)
	mkdir -p $(MATHJAX)/output
	src=$$($(PY) -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__file__).parent / "static" / "mathjax")'); \
	  cp "$$src/LICENSE" $(MATHJAX)/; \
	  cp -r "$$src/es5/input" "$$src/es5/ui" "$$src/es5/a11y" "$$src/es5/sre" $(MATHJAX)/; \
	  cp -r "$$src/es5/output/chtml" $(MATHJAX)/output/; \
	  cp "$$src/es5/tex-mml-chtml.js" $@

# Two editions from the same sources: English in _build/html, and Chinese in _build/html/zh from the
# catalogs in locales/zh_CN (tools/i18n.py). Each page links to its counterpart in the other.
# The two Sphinx builds run side by side (each reads serially; their doctrees and myst-nb's files
# are apart: _build/.doctrees and _build/jupyter_execute, _build/zh); each log is printed when it
# ends, and either one failing fails the target.
book: $(STAMP) $(MATHJAX)/tex-mml-chtml.js  ## build the HTML book, English in _build/html and Chinese in _build/html/zh (strict: warnings fail)
	@mkdir -p _build/logs
	@echo "$(BIN)/jupyter-book build . --all -W -n --keep-going  &  $(PY) tools/i18n.py build"
	@$(BIN)/jupyter-book build . --all -W -n --keep-going > _build/logs/book-en.log 2>&1 & en=$$!; \
	  $(PY) tools/i18n.py build > _build/logs/book-zh.log 2>&1 & zh=$$!; \
	  status=0; wait $$en || status=1; echo "--- English edition"; cat _build/logs/book-en.log; \
	  wait $$zh || status=1; echo "--- Chinese edition"; cat _build/logs/book-zh.log; \
	  exit $$status

# After the English text changed: new and changed messages arrive empty or marked fuzzy in the
# catalogs, to be translated there; messages that left the text are dropped.
# PAGES="book/decode book/gqa" merges only those pages' catalogs (edits of other pages stay untouched).
i18n-update: $(STAMP)  ## extract the English text's messages and merge them into the Chinese catalogs (locales/zh_CN)
	$(PY) tools/i18n.py update $(if $(PAGES),--pages $(PAGES))

# The Chinese figures are drawn in a CJK font that matplotlib can use; the lookup ($$KVTUTOR_CJK_FONT,
# else WenQuanYi Zen Hei, Noto Sans CJK, Source Han Sans, PingFang, Heiti, Microsoft YaHei, SimHei,
# else what fontconfig lists for Chinese) is kvtutor.book.editions.cjk_font. As root with apt-get,
# Debian's fonts-wqy-zenhei is installed if none is found; without one, a one-line error.
font: $(STAMP)  ## find a CJK font for the Chinese figures (as root with apt-get: install fonts-wqy-zenhei)
	@if ! $(PY) -m kvtutor.book.editions font >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	    && command -v apt-get >/dev/null; then \
	  echo "apt-get update && apt-get install -y fonts-wqy-zenhei"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q fonts-wqy-zenhei; \
	fi
	@$(PY) -m kvtutor.book.editions font

# The browser check drives an installed Chromium or Chrome, never a downloaded one; the lookup
# ($$KVTUTOR_CHROMIUM, then PATH, then the macOS apps) lives in tests/browser/chromium.py.
# As root with apt-get, Debian's chromium is installed if missing; the CJK font (`make font`) draws
# the Chinese edition's text in the browser too.
chromium: $(STAMP) font  ## find Chromium or Chrome (as root with apt-get: install chromium)
	@if ! $(PY) tests/browser/chromium.py >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	    && command -v apt-get >/dev/null; then \
	  echo "apt-get update && apt-get install -y chromium"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	fi; \
	fc-list :lang=zh-cn 2>/dev/null | grep -q . || echo "note: fontconfig lists no Chinese font:" \
	  "the browser draws the Chinese edition's text as boxes" >&2; \
	browser=$$($(PY) tests/browser/chromium.py); echo "browser: $$browser"

browser: book chromium  ## open every chapter in headless Chromium and check it
	$(BIN)/pytest -n $(JOBS) tests/browser

# Every chapter alone, from a copy outside the repository, in the reader's environment above, on
# a second CPU: NumPy, torch and BLAS on the SIMD kernels of a CPU one level below this one (AVX2
# on an AVX-512 machine, else the SSE4.2 baseline; the last bits of float32 results change), with
# outputs compared to the stored ones as strict nbval compares them. CPU=baseline, avx2 or native
# pick the kernels.
CPU     ?= second
standalone: $(READER)/.installed  ## run every chapter as in Colab (only kvtutor[notebooks]) on a second CPU's kernels, and compare its outputs
	$(READER)/bin/pip install --quiet --no-deps --force-reinstall .  # this checkout's kvtutor, not a stale one
	cd $(READER) && $(NBENV) $(GATEENV) JUPYTER_PREFER_ENV_PATH=1 bin/python $(abspath tools/run_standalone.py) \
	  --cpu $(CPU) --jobs $(JOBS) $(abspath $(wildcard book/*.ipynb))

# The browser comes first, so that a machine without one learns it in seconds, not after nbval.
test: chromium lint unit nbval standalone book browser  ## everything CI runs, in order, stopping at the first failure

$(KERNEL): $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name 'Python 3 (ipykernel)'

# A figure's formatter cannot fail its cell (IPython stores what it raised as an error output), so
# the last step names any EditionError the run stored and fails.
notebooks: $(KERNEL) font  ## re-execute every book/*.ipynb in place and store the outputs
	$(NBENV) $(STRICT_ZH) JUPYTER_PREFER_ENV_PATH=1 $(BIN)/jupyter nbconvert \
	  --to notebook --execute --inplace --ExecutePreprocessor.kernel_name=python3 \
	  --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.store_widget_state=False book/*.ipynb
	$(PY) tools/clean_outputs.py book/*.ipynb
	$(PY) -m kvtutor.book.editions check book/*.ipynb

serve:  ## serve the built book on http://127.0.0.1:$(PORT)/ (after `make book`)
	@test -f $(HTML)/index.html || { echo "no $(HTML)/index.html: run 'make book' first" >&2; exit 1; }
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory $(HTML)

bench: $(STAMP)  ## measure this machine and record src/kvtutor/data/runs/bench-cpu.json
	$(PY) -m kvtutor bench --size full --out src/kvtutor/data/runs/bench-cpu.json

# Pins the CPU torch wheel; without the pin pip resolves the multi-GB CUDA build. Run it with the
# oldest Python that PY_MIN admits (Debian 12's 3.11.2: `make constraints PYTHON=/usr/bin/python3.11`)
# so that no pin needs a newer one; tests/test_conventions.py checks every pin against PY_MIN.
constraints:  ## re-pin constraints.txt from a fresh throwaway venv
	rm -rf _build/freeze-venv
	$(PYTHON) -m venv _build/freeze-venv
	_build/freeze-venv/bin/pip install $(if $(TORCH_INDEX),--extra-index-url '$(TORCH_INDEX)') \
	  -e '.[dev]' 'torch==$(TORCH)'
	{ sed -n '/^#/p' constraints.txt; \
	  _build/freeze-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' \
	    | sed 's/^torch==$(TORCH)+cpu$$/torch==$(TORCH)/'; \
	} > _build/constraints.txt
	mv _build/constraints.txt constraints.txt
	rm -rf _build/freeze-venv

clean:  ## remove build outputs and caches (keeps .venv: `make distclean` removes it too)
	rm -rf _build $(MATHJAX) .pytest_cache .hypothesis .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	@if [ -e $(VENV) ] && [ -z "$(filter distclean,$(MAKECMDGOALS))" ]; then \
	  echo "kept $(VENV): 'make distclean' removes it too"; fi

distclean: clean  ## clean, and remove .venv (the next make recreates it)
	rm -rf $(VENV)
