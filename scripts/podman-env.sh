# Sourced by scripts/image-build.sh (the deploy tests then run, compose and play the image with the
# settings it prints): installs podman when it is missing, writes podman's settings for this project
# in a folder of its own and exports CONTAINERS_CONF, so that nothing of the host's podman setup
# changes.
#
# The settings (see containers.conf(5)):
# - runtime runc: crun, podman's default, refuses hosts whose cgroups are hybrid (v1 and v2 mounted);
# - cgroupfs: no systemd is needed to place containers in cgroups;
# - default ulimits no higher than this shell's hard limits: raising one needs CAP_SYS_RESOURCE,
#   which a container host may not have (podman's defaults ask for more than many hosts allow);
# - events in a file: no journald is needed.
# shellcheck shell=bash

LLAMADOCK_PODMAN_DIR="${LLAMADOCK_PODMAN_DIR:-${LLAMADOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llamadock}/podman}"

podman_log() { printf '[podman] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo --preserve-env=CONTAINERS_CONF "$@"; fi; }
apt_install() {
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >&2
}

# Containers run as root here (rootless podman needs subordinate ids and a user session); as
# another user, through sudo.
podman() { as_root "$(type -P podman)" "$@"; }

# Installs with apt the commands of `command:package` pairs that are missing.
ensure_commands() {
  local wanted="" pair
  for pair in "$@"; do command -v "${pair%%:*}" >/dev/null 2>&1 || wanted="$wanted ${pair#*:}"; done
  if [ -n "$wanted" ]; then
    podman_log "installing with apt:$wanted"
    # shellcheck disable=SC2086
    apt_install $wanted
  fi
}

# The lower of `ulimit -H<flag>` and `cap` (an unlimited one is the cap).
ulimit_capped() {
  local hard
  hard="$(ulimit -H"$1")"
  if [ "$hard" = unlimited ] || [ "$hard" -gt "$2" ]; then echo "$2"; else echo "$hard"; fi
}

write_podman_settings() {
  local nofile nproc conf="$LLAMADOCK_PODMAN_DIR/containers.conf"
  nofile="$(ulimit_capped n 1048576)"
  nproc="$(ulimit_capped u 32768)"
  mkdir -p "$LLAMADOCK_PODMAN_DIR"
  cat >"$conf.tmp" <<EOF
# Written by scripts/podman-env.sh for llamadock; read by podman through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  mv "$conf.tmp" "$conf"
  export CONTAINERS_CONF="$conf"
}

ensure_commands podman:podman runc:runc
write_podman_settings
