#!/usr/bin/env bash
# Installs what the project needs on a fresh machine (Node, npm and apt; nothing else assumed).
# Idempotent and quick when nothing changed; `npm start` and `npm test` call it first.
#   scripts/setup.sh          dependencies (with a supported Node) + the llama-server binary
#   scripts/setup.sh --test   the same, plus what the tests need from apt, and the image
# Each step that ran says how long it took (`[setup] llama-server: 9m48s`). llama-server compiles
# (minutes, every core) while the rest is fetched and installed beside it: the npm dependencies,
# and with --test the apt packages and the image's stages that need no llama-server.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[setup] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || as_root apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@"
}
# `name: 4m07s` once `command...` has run (it stops the script when it fails, as any step does).
timed() {
  local name="$1" start=$SECONDS elapsed
  shift
  "$@"
  elapsed=$((SECONDS - start))
  log "$name: $((elapsed / 60))m$(printf %02d $((elapsed % 60)))s"
}

# npm must itself run on a supported Node (>= 22.15), or it warns about every package that needs
# one. The machine's Node may be older, so npm runs under the Node that package.json pins, fetched
# from the npm registry; that same Node lands in node_modules/.bin for every npm script.
install_dependencies() {
  local node_version stamp=node_modules/.package-lock.json
  node_version="$(sed -n 's/.*"node": *"\([0-9][0-9.]*\)".*/\1/p' package.json | head -n 1)"
  if [ ! -f "$stamp" ] || [ package.json -nt "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
    log "installing dependencies with Node $node_version"
    # `npm ci`: exactly the lockfile, which lists every platform's runtime packages, and never rewrites it.
    timed "dependencies (npm ci)" npx --yes -p "node@$node_version" npm ci --no-audit --no-fund
    touch "$stamp"
  fi
}

# llama-server: taken from LLAMA_SERVER_PATH or PATH when there is one, else built once from the
# llama.cpp source that node-llama-cpp ships and cached per release (about 10 minutes on 2 cores).
# The build runs in its own process group (job control), so that a failing step ends all of it.
building=""
build_llama_server() {
  { [ -z "${LLAMA_SERVER_PATH:-}" ] && ! command -v llama-server >/dev/null 2>&1; } || return 0
  bash sidecar/build-llama-server.sh --cached >/dev/null && return 0
  local missing="" tool
  for tool in git cmake g++ make; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
  if [ -n "$missing" ]; then
    log "installing build tools with apt:$missing"
    timed "build tools (apt)" apt_install git cmake g++ make
  fi
  set -m
  timed llama-server bash sidecar/build-llama-server.sh >/dev/null &
  building=$!
  set +m
}
stop_build() { [ -z "$building" ] || kill -- "-$building" 2>/dev/null || true; }
trap stop_build EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --test: the model tests pull from a real OCI registry (CNCF distribution, Debian's docker-registry);
# the security tests open pages in a real browser (Debian's chromium, headless); the command's
# tests drive it in tmux; the deploy tests render the Kubernetes manifests with kubectl, and build
# and run the image with podman.
install_test_packages() {
  local wanted="" tool
  [ -x /usr/bin/docker-registry ] || wanted="$wanted docker-registry"
  command -v chromium >/dev/null 2>&1 || wanted="$wanted chromium"
  # The command's interactive chat is driven in a terminal multiplexer (send-keys, capture-pane).
  command -v tmux >/dev/null 2>&1 || wanted="$wanted tmux"
  # The image is built and run with podman (runc: see scripts/podman-env.sh), its base made with
  # mmdebstrap; the compose file is run with podman-compose; skopeo pulls back what the push tests push.
  for tool in podman runc mmdebstrap podman-compose skopeo; do command -v "$tool" >/dev/null 2>&1 || wanted="$wanted $tool"; done
  # The Kubernetes manifests are rendered with kubectl's Kustomize (components need Kustomize v4+,
  # so Debian's old kubernetes-client will not do): installed when apt offers a `kubectl` package.
  if ! command -v kubectl >/dev/null 2>&1; then
    if apt-cache show kubectl >/dev/null 2>&1; then wanted="$wanted kubectl"
    else log "kubectl is not offered by apt here: the Kubernetes manifest tests will be skipped (and fail where CI is set)"; fi
  fi
  if [ -n "$wanted" ]; then
    log "installing with apt:$wanted"
    # shellcheck disable=SC2086
    timed "test packages (apt)" apt_install $wanted
  fi
}

# The image the deploy tests run (containers run as root). Its stages that need no llama-server are
# built while llama-server compiles; the image then takes that build rather than compiling it again
# (scripts/image-build.sh), and a later build only rebuilds what changed, in seconds.
can_build_image() { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }

build_llama_server
install_dependencies
if [ "${1:-}" = "--test" ]; then
  install_test_packages
  if [ -n "$building" ] && can_build_image; then
    timed "image base and stages without llama-server" bash scripts/image-build.sh --prepare >/dev/null
  fi
fi
if [ -n "$building" ]; then
  wait "$building"
  building=""
fi
if [ "${1:-}" = "--test" ]; then
  if can_build_image; then
    log "building the image (npm run image:build)"
    timed image bash scripts/image-build.sh >/dev/null
  else
    log "neither root nor sudo: the image is not built, and its tests will be skipped"
  fi
fi
