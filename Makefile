# MTP Studio — `make run` starts the app on the bundled demo model, `make test` runs
# every test. Both build the virtualenv from nothing (python3 >= 3.11) and are quick
# the second time: the install step re-runs only when pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

export GGML_NO_BACKTRACE := 1

.PHONY: run test venv clean package package-test

run: $(STAMP)
	$(VENV)/bin/mtp-studio

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

venv: $(STAMP)

$(PY):
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else "MTP Studio needs Python >= 3.11; $(PYTHON) is %d.%d. Run: make PYTHON=python3.11" % v[:2])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# llama-cpp-python builds llama.cpp from source (minutes); pip caches the wheel, so
# later installs reuse it. CMAKE_ARGS comes from the backend plan for this machine.
$(STAMP): pyproject.toml | $(PY)
	CMAKE_ARGS="$${CMAKE_ARGS:-$$($(PYTHON) -m engine.backends.plan --cmake-args 2>/dev/null)}" \
		$(PY) -m pip install -e '.[test]'
	@touch $@

# A self-contained one-folder app (PyInstaller) and, on Linux, a tarball with a .desktop
# entry, the icon and an install script; macOS: MTP Studio.app. See README, Packaging.
package: $(STAMP)
	$(PY) packaging/build.py

# builds the package and runs the frozen binary's self-test (also part of `make test`)
package-test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/packaging -m packaging -v

clean:
	rm -rf $(VENV) build dist *.egg-info
