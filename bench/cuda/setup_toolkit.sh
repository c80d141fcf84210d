#!/usr/bin/env bash
# The CUDA 13.0 toolkit that `cargo build --release --features cuda` needs, from PyPI wheels, with no system
# CUDA and no root: nvcc (with cicc and the crt headers, shipped apart in CUDA 13), the runtime, cuBLAS,
# cuRAND and NVRTC, their unversioned link names, and a link stub for the driver library `libcuda.so.1`
# (candle's cudarc links it; the real one is the GPU machine's driver, found at run time).
#
#   bash bench/cuda/setup_toolkit.sh [PREFIX]      # default: $AGENTRT_CACHE/toolchains/cuda-13.0
#   eval "$(bash bench/cuda/setup_toolkit.sh --env [PREFIX])"   # the variables a build needs, to export
#
# 13.0.x on purpose: PTX from an nvcc newer than the driver's CUDA may not load (an H100/H200 machine with
# driver 580 runs CUDA 13.0). CUDA_COMPUTE_CAP defaults to 90 (Hopper); set it before for another GPU.
set -euo pipefail

only_env=false
if [ "${1:-}" = "--env" ]; then
    only_env=true
    shift
fi
cache="${AGENTRT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrt}"
prefix="${1:-$cache/toolchains/cuda-13.0}"
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac

print_env() {
    echo "export CUDA_ROOT='$prefix' CUDA_PATH='$prefix' CUDA_COMPUTE_CAP='${CUDA_COMPUTE_CAP:-90}'"
    echo "export PATH='$prefix/bin':\"\$PATH\""
    # The linker finds the libraries (and the driver stub) here; at run time LD_LIBRARY_PATH must name the
    # real driver's directory first, then '$prefix/lib'.
    echo "export LIBRARY_PATH='$prefix/lib:$prefix/stub'\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
}

if [ -x "$prefix/bin/nvcc" ] && [ -e "$prefix/stub/libcuda.so" ]; then
    $only_env || echo "the CUDA toolkit is already in $prefix" >&2
    print_env
    exit 0
fi
$only_env && { echo "no CUDA toolkit in $prefix yet: run bash $0 $prefix first" >&2; exit 1; }

WHEELS=(
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
    nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14 nvidia-curand==10.4.5.25 nvidia-cuda-nvrtc==13.0.88
)
mkdir -p "$(dirname "$prefix")"
work="$(mktemp -d "$(dirname "$prefix")/.cuda-partial.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fetching ${#WHEELS[@]} CUDA 13.0 wheels from PyPI into $work" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$work/wheels" "${WHEELS[@]}"
for wheel in "$work"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$work/unpacked"
done
root="$work/unpacked/nvidia/cu13"
chmod +x "$root"/bin/* "$root"/nvvm/bin/*
# Unversioned names for the linker (-lcublas ...), as a system toolkit has them.
for lib in "$root"/lib/lib*.so.*; do
    name="$(basename "$lib")"
    ln -sf "$name" "$root/lib/${name%%.so.*}.so"
done
# The driver API's entry points as they are exported (cuda.h renames some to their _v2, _v3 forms), each a
# stub that fails: enough to link, never to run.
mkdir -p "$root/stub"
gcc -E -P -x c "$root/include/cuda.h" -I "$root/include" 2>/dev/null |
    grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u |
    awk '{ printf "int %s(void) { return 999; }\n", $1 }' >"$root/stub/cuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root/stub/libcuda.so.1" "$root/stub/cuda_stub.c"
ln -sf libcuda.so.1 "$root/stub/libcuda.so"
rm -rf "$prefix"
mv "$root" "$prefix"
echo "the CUDA 13.0 toolkit is in $prefix ($(du -sh "$prefix" | cut -f1))" >&2
print_env
