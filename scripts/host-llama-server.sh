#!/usr/bin/env bash
# Prints the folder of this host's llama-server build (the one sidecar/build-llama-server.sh caches)
# when an image on BASE_IMAGE can take it instead of compiling llama.cpp again (scripts/image-build.sh
# then gives it to the build); else says why on stderr and fails. It can when it is
# - the build that script makes of the llama.cpp release it pins (the cache is per release), with
#   the flags the image's own compilation uses (GGML_NATIVE=OFF: a fixed instruction set, not the
#   one this host's CPU has);
# - a CPU build (the image is the CPU one);
# - in need of no version of the C or C++ runtime (its ELF version needs: GLIBC_2.34,
#   GLIBCXX_3.4.30...) newer than BASE_IMAGE's libc.so.6 and libstdc++.so.6 define, the check
#   engine pulls make of glibc (the image then runs it once, in the Dockerfile's llama-server stage).
#
#   scripts/host-llama-server.sh BASE_IMAGE
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/podman-env.sh
source scripts/podman-env.sh
base="$1"

not_taken() { podman_log "$*: llama-server is compiled in the image"; exit 1; }
# The newest version named `$1...` (GLIBC_, GLIBCXX_) among the lines read.
newest() { grep -o "$1[0-9.]*[0-9]" | sort -uV | tail -n 1; }
# Whether version $1 is newer than $2 (GLIBC_2.38 than GLIBC_2.36).
newer() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$1" ]; }

dir="$(bash sidecar/build-llama-server.sh --cached)" || not_taken "no llama-server build on this host"
flavour="$(cat "$dir/../FLAVOUR" 2>/dev/null || echo cpu)"
[ "$flavour" = cpu ] || not_taken "this host's llama-server is a $flavour build"
command -v readelf >/dev/null 2>&1 || not_taken "no readelf here to read what this host's llama-server needs"

needs="$(readelf --version-info --wide "$dir"/llama-server "$dir"/*.so* | grep -o 'Name: GLIBC[A-Z]*_[0-9.]*' | cut -d' ' -f2)"
# The image's files, mounted read-only where this host reads them (no container is started).
root="$(podman image mount "$base")"
trap 'podman image unmount "$base" >/dev/null' EXIT
defines="$(as_root sh -c 'grep -aoh "GLIBC[A-Z]*_[0-9.]*[0-9]" "$1"/lib/*-linux-gnu/libc.so.6 "$1"/usr/lib/*-linux-gnu/libstdc++.so.6' sh "$root" 2>/dev/null)" || true
for runtime in GLIBC_ GLIBCXX_; do
  needed="$(newest "$runtime" <<<"$needs")"
  defined="$(newest "$runtime" <<<"$defines")"
  if [ -n "$needed" ] && { [ -z "$defined" ] || newer "$needed" "$defined"; }; then
    not_taken "this host's llama-server needs $needed and $base has ${defined:-none}"
  fi
done
echo "$dir"
