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
# later installs reuse it. CMAKE_ARGS comes from the backend plan for this machine, with
# llama.cpp's RPC backend (`mtp-studio rpc serve`, --rpc). pip's wheel cache ignores
# CMAKE_ARGS, so a cached wheel without RPC is caught and rebuilt once, uncached.
LLAMA_CMAKE_ARGS = $${CMAKE_ARGS:-$$($(PYTHON) -m engine.backends.plan --rpc --cmake-args 2>/dev/null)}
HAS_RPC = env -u LLAMA_CPP_LIB_PATH MTP_STUDIO_NO_BACKEND_SELECTION=1 $(PY) -c 'import sys; from engine.rpc.server import rpc_supported; sys.exit(0 if rpc_supported() else 1)'

$(STAMP): pyproject.toml | $(PY)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -e '.[test]'
	@$(HAS_RPC) || { echo "llama-cpp-python was installed without the RPC backend: rebuilding it (minutes)"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --no-cache-dir --force-reinstall --no-deps \
		"llama-cpp-python==$$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)" && $(HAS_RPC); }
	@touch $@

# A self-contained one-folder app (PyInstaller) and, on Linux, a tarball with a .desktop
# entry, the icon and an install script; macOS: MTP Studio.app. See docs/packaging.md.
package: $(STAMP)
	$(PY) packaging/build.py

# builds the package and runs the frozen binary's self-test (also part of `make test`)
package-test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/packaging -m packaging -v

clean:
	rm -rf $(VENV) build dist *.egg-info
