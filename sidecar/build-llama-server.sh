#!/usr/bin/env bash
# Builds llama-server from the llama.cpp release source that the npm package node-llama-cpp
# ships as a git bundle (the only source of llama.cpp reachable from the npm registry), and caches
# it per llama.cpp version, so that a machine builds it once.
# With a CUDA toolkit (nvcc on PATH or in /usr/local/cuda) it builds with CUDA, else for the CPU;
# LLAMADOCK_BUILD_CUDA=0 builds for the CPU anyway. A cached CPU build is rebuilt once a toolkit
# is there; a cached CUDA build is kept.
# Prints the directory that holds the binary and its shared libraries.
#   build-llama-server.sh            builds it unless it is cached
#   build-llama-server.sh --cached   builds nothing: prints the cached build's folder, or fails
set -euo pipefail

NODE_LLAMA_CPP_VERSION="${NODE_LLAMA_CPP_VERSION:-3.22.1}"   # ships llama.cpp v0.5.0
LLAMA_CPP_TAG="${LLAMA_CPP_TAG:-v0.5.0}"
CACHE_ROOT="${LLAMADOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llamadock}"
DEST="$CACHE_ROOT/llama.cpp-$LLAMA_CPP_TAG"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ "${1:-}" = --cached ]; then
  [ -x "$DEST/bin/llama-server" ] || exit 1
  echo "$DEST/bin"
  exit 0
fi

log() { printf '[llama-server build] %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { log "missing tool: $1 ($2)"; exit 1; }; }

# A toolkit is nvcc and cuBLAS (ggml's CUDA backend links it): a compiler alone cannot build it.
has_cublas() {
  ldconfig -p 2>/dev/null | grep -q 'libcublas\.so' && return 0
  local found
  found="$(ls ${CUDA_HOME:+"$CUDA_HOME"/lib64/libcublas.so*} /usr/local/cuda*/lib64/libcublas.so* \
    /usr/local/cuda*/targets/*/lib/libcublas.so* /usr/lib/*/libcublas.so* 2>/dev/null | head -n 1)"
  [ -n "$found" ]
}
NVCC="$(command -v nvcc || true)"
if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
FLAVOUR=cpu
if [ -n "$NVCC" ] && [ "${LLAMADOCK_BUILD_CUDA:-auto}" != "0" ]; then
  if has_cublas; then FLAVOUR=cuda; else CUDA_NOTE="nvcc found but no cuBLAS (an incomplete CUDA toolkit)"; fi
fi
BUILT_FLAVOUR="$(cat "$DEST/FLAVOUR" 2>/dev/null || echo cpu)"

if [ -x "$DEST/bin/llama-server" ] && { [ "$FLAVOUR" = cpu ] || [ "$BUILT_FLAVOUR" = cuda ]; }; then
  echo "$DEST/bin"
  exit 0
fi

if [ "$FLAVOUR" = cuda ]; then
  log "CUDA toolkit found ($("$NVCC" --version | tail -n 1)): building with CUDA"
  GPU_FLAGS=(-DGGML_CUDA=ON "-DCMAKE_CUDA_COMPILER=$NVCC")
else
  log "${CUDA_NOTE:-no CUDA toolkit (nvcc) found}: building for the CPU"
  GPU_FLAGS=()
fi

need git "apt-get install git"
need cmake "apt-get install cmake"
need g++ "apt-get install g++"
need npm "install Node.js and npm"
need tar "apt-get install tar"

work="$(mktemp -d "${TMPDIR:-/tmp}/llamadock-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION (source bundle of llama.cpp $LLAMA_CPP_TAG)"
(cd "$work" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
tar -xzf "$work"/node-llama-cpp-*.tgz -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
shipped_tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$work/package/llama/llama.cpp.info.json")"
if [ "$shipped_tag" != "$LLAMA_CPP_TAG" ]; then
  log "node-llama-cpp@$NODE_LLAMA_CPP_VERSION ships llama.cpp $shipped_tag, expected $LLAMA_CPP_TAG"
  exit 1
fi

log "cloning the bundle"
git -c advice.detachedHead=false clone --quiet "$work/package/llama/gitRelease.bundle" "$work/src"

# RPATH $ORIGIN: the binary finds its libllama/libggml beside it after the build folder is gone.
log "configuring (cmake)"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_NATIVE=OFF -DCMAKE_BUILD_RPATH='$ORIGIN' "${GPU_FLAGS[@]}" >"$work/cmake.log" 2>&1 || { tail -n 30 "$work/cmake.log" >&2; log "cmake configure failed"; exit 1; }

log "compiling llama-server ($FLAVOUR) with $JOBS jobs (about 10 minutes on 2 cores for the CPU; far longer with CUDA)"
cmake --build "$work/build" --target llama-server -j "$JOBS" 2>&1 \
  | tee "$work/build.log" | grep --line-buffered -E '^\[ *[0-9]+%\]' | sed -u 's/^/[llama-server build] /' >&2 || true
if [ ! -x "$work/build/bin/llama-server" ]; then
  tail -n 40 "$work/build.log" >&2
  log "build failed: see the lines above"
  exit 1
fi

# Publish atomically: a half-copied cache must never look complete.
mkdir -p "$CACHE_ROOT"
staging="$(mktemp -d "$CACHE_ROOT/.staging.XXXXXX")"
mkdir -p "$staging/bin"
cp -a "$work/build/bin/." "$staging/bin/"
echo "$LLAMA_CPP_TAG" >"$staging/VERSION"
echo "$FLAVOUR" >"$staging/FLAVOUR"
rm -rf "$DEST"
mv "$staging" "$DEST"
log "done: $DEST/bin/llama-server"
echo "$DEST/bin"
