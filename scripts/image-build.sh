#!/usr/bin/env bash
# `npm run image:build`: builds the image localhost/llamadock:cpu from the Dockerfile with podman.
# Needs a Debian-like host with apt, root (or sudo), and Debian's mirror and the npm registry
# reachable (from the build too); no container registry is needed: the base image is made here with
# mmdebstrap from Debian's mirror (BASE_IMAGE=debian:bookworm-slim uses the official one instead).
# The build reuses podman's layer cache: a change to src/ rebuilds the last layers only.
# llama-server is not compiled a second time when this host has the build that setup makes
# (sidecar/build-llama-server.sh, for the CPU) and the base image's C library can run it
# (scripts/host-llama-server.sh): that build is given as the build context llama-server-build,
# which replaces the Dockerfile's stage of that name and the compilation it needs.
#
#   scripts/image-build.sh [extra podman build arguments...]
#   scripts/image-build.sh --prepare   only the base and the stages that need no llama-server, into
#                                      the layer cache (setup runs it while llama-server compiles)
#   IMAGE=localhost/llamadock:cpu      the name given to the image
#   IMAGE_LLAMA_SERVER=source          compile llama-server in the image even so (default: auto)
#
# Prints the path of the podman settings it wrote (CONTAINERS_CONF) on stdout; all else on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/podman-env.sh
source scripts/podman-env.sh

IMAGE="${IMAGE:-localhost/llamadock:cpu}"
LOCAL_BASE=localhost/llamadock-base:bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org}"

# Debian bookworm's minimal system (what debian:bookworm-slim holds: essential packages and apt,
# without manuals, docs and translations), from the mirror, with its updates and security updates.
make_local_base() {
  ensure_commands mmdebstrap:mmdebstrap
  podman_log "making the base image $LOCAL_BASE with mmdebstrap (Debian bookworm, minbase)"
  local tar
  tar="$(mktemp -d "${TMPDIR:-/tmp}/llamadock-base.XXXXXX")"
  # Removed on the way out too when a step fails (set -e); expanded now, as $tar is local.
  # shellcheck disable=SC2064
  trap "rm -rf '$tar'" EXIT
  as_root mmdebstrap --quiet --variant=minbase \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    bookworm "$tar/base.tar" \
    "deb $DEBIAN_MIRROR/debian bookworm main" \
    "deb $DEBIAN_MIRROR/debian bookworm-updates main" \
    "deb $DEBIAN_MIRROR/debian-security bookworm-security main" >&2
  podman import --change 'CMD ["/bin/bash"]' "$tar/base.tar" "$LOCAL_BASE" >/dev/null
  rm -rf "$tar"
  trap - EXIT
}

# A cold build compiles llama.cpp for minutes on every core: at a lower priority, whatever else runs
# here (tests beside it) keeps its share.
renice -n 10 $$ >/dev/null 2>&1 || true

# One build at a time (tests run side by side): a second one waits, then finds every layer cached.
exec 9>"$LLAMADOCK_PODMAN_DIR/build.lock"
flock 9

base="${BASE_IMAGE:-}"
if [ -z "$base" ]; then
  base="$LOCAL_BASE"
  # Made once and kept: a new base (a new image id) would rebuild every layer, llama.cpp too.
  podman image exists "$base" || make_local_base
fi

# Inside the build, HTTPS (npm registry) is checked against this host's CA bundle, mounted read-only
# where Debian keeps it: a TLS proxy that the host trusts is trusted by the build too. The mount is
# not part of any layer. Docker-format image: the OCI format has no HEALTHCHECK.
ca_mount=()
[ -s /etc/ssl/certs/ca-certificates.crt ] && ca_mount=(--volume /etc/ssl/certs:/etc/ssl/certs:ro)

build() { podman build --format docker --layers --build-arg "BASE_IMAGE=$base" --build-arg "LLAMA_BUILD_IMAGE=$base" "${ca_mount[@]}" "$@" . >&2; }
start=$SECONDS

if [ "${1:-}" = --prepare ]; then
  podman_log "building the stages that do not need llama-server on $base"
  for stage in llama-server-pack bun deps; do build --target "$stage"; done
  podman_log "built them in $((SECONDS - start)) s"
  echo "$CONTAINERS_CONF"
  exit 0
fi

llama_server=()
if [ "${IMAGE_LLAMA_SERVER:-auto}" != source ] && host_build="$(bash scripts/host-llama-server.sh "$base")"; then
  podman_log "llama-server: this host's build ($host_build), not compiled again"
  llama_server=(--build-context "llama-server-build=$host_build")
fi

podman_log "building $IMAGE on $base"
build --tag "$IMAGE" "${llama_server[@]}" "$@"
podman_log "built $IMAGE in $((SECONDS - start)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
echo "$CONTAINERS_CONF"
