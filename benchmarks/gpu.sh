#!/usr/bin/env bash
# The GPU check in one command, for a machine with an NVIDIA GPU (CUDA toolkit on PATH) or a
# Mac (Metal):
#
#     bash benchmarks/gpu.sh [OUT_DIR] [SIZE_MB]
#
# 1. builds the GPU backend through the backend picker (`mtp-studio backend build`: the plan
#    for this machine's GPUs and toolkit), which smoke-tests the build and selects it;
# 2. builds llama-server from the same vendored llama.cpp with the same CMake arguments;
# 3. generates a bench model of SIZE_MB (default 4000: a multi-GB model, full acceptance) and
#    runs the MTP A/B bench and `bench slots` against llama-server on it and on the demo.
# Every figure goes to OUT_DIR (default gpu-figures/) as JSON, with the machine's description.
#
# Needs the project's virtualenv (`make venv`) and the llama-cpp-python sdist where pip finds
# it: on a machine without network, set PIP_NO_INDEX=1 and PIP_FIND_LINKS to a folder holding
# llama_cpp_python-0.3.36.tar.gz and its build requirements (scikit-build-core, cmake, ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-figures}
SIZE_MB=${2:-4000}
PY=.venv/bin/python
MTP=.venv/bin/mtp-studio
export GGML_NO_BACKTRACE=1
mkdir -p "$OUT"
step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv 2>/dev/null || true
  nvcc --version 2>/dev/null | tail -1 || true; nproc; } | tee "$OUT/machine.txt"
$MTP backend detect --json > "$OUT/detect.json"

step "backend build through the picker (smoke test included)"
CMAKE_ARGS=$($PY -m engine.backends.plan --rpc --cmake-args)
echo "CMAKE_ARGS=$CMAKE_ARGS" | tee -a "$OUT/machine.txt"
$MTP backend build 2>&1 | tail -20 | tee "$OUT/backend-build.txt"
$MTP backend smoke --json > "$OUT/smoke.json"
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["message"]); sys.exit(0 if r["ok"] else 1)' "$OUT/smoke.json"

step "llama-server from the same source and CMake arguments"
SRC=$(mktemp -d)
$PY -m pip download --no-deps --no-binary :all: -d "$SRC" "llama-cpp-python==0.3.36" >/dev/null
tar xzf "$SRC"/llama_cpp_python-0.3.36.tar.gz -C "$SRC"
# shellcheck disable=SC2086
cmake -S "$SRC/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$SRC/build" -DLLAMA_BUILD_SERVER=ON \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF $CMAKE_ARGS >/dev/null
cmake --build "$SRC/build" --target llama-server -j"$(nproc)" >/dev/null
SERVER="$SRC/build/bin/llama-server"

step "a ${SIZE_MB} MB bench model (full acceptance) and the near-zero one"
$MTP bench make-model --size-mb "$SIZE_MB" --acceptance 1.0 --out "$SRC/big-full.gguf"
$MTP bench make-model --size-mb "$SIZE_MB" --acceptance 0.05 --out "$SRC/big-low.gguf"

for model in resources/demo.gguf "$SRC/big-full.gguf" "$SRC/big-low.gguf"; do
  name=$(basename "$model" .gguf)
  step "MTP A/B on $name"
  $MTP bench --model "$model" --runs 3 --json > "$OUT/ab-$name.json"
  step "bench slots on $name against llama-server"
  $MTP bench slots --model "$model" --llama-server "$SERVER" --rounds 3 --json > "$OUT/slots-$name.json"
done
step "done: figures in $OUT"
