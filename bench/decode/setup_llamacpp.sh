#!/usr/bin/env bash
# Builds llama.cpp's own benchmark tools (llama-bench, llama-batched-bench) as the decoding peer, from the
# llama.cpp sources vendored in PyPI's `llama-cpp-python` source package (PyPI is what this network
# reaches; GitHub is not). cmake comes from PyPI too, into bench/decode/.venv. A peer, never a dependency.
#
# Usage: bench/decode/setup_llamacpp.sh            (native flags: what this CPU has)
#        LLAMA_NATIVE=OFF bench/decode/setup_llamacpp.sh   (a portable build; see bench/decode/README.md)
#        LLAMA_AMX=OFF bench/decode/setup_llamacpp.sh      (native, but without ggml's AMX kernels, which
#                                                           -march=native turns on where the CPU has AMX;
#                                                           say so beside every number measured with it)
# Writes bench/decode/llama.cpp-build/bin/{llama-bench,llama-batched-bench}; ~10 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
venv="$here/.venv"
src="$here/llama-cpp-python-$version"
build="$here/llama.cpp-build"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --disable-pip-version-check -q "cmake>=3.21" ninja
if [ ! -d "$src" ]; then
  tmp="$(mktemp -d)"
  "$venv/bin/pip" download --disable-pip-version-check -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$here"
  mv "$here/llama_cpp_python-$version" "$src"
  rm -rf "$tmp"
fi
export PATH="$venv/bin:$PATH"
no_amx=""
[ "${LLAMA_AMX:-ON}" = OFF ] && no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$src/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE="${LLAMA_NATIVE:-ON}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target llama-bench llama-batched-bench llama-server
"$build/bin/llama-bench" --help >/dev/null
echo "llama.cpp tools (llama-cpp-python $version's vendored sources): $build/bin"
