#!/bin/sh
# The image's entry point: runs the command given (the server by default) after one check.
# A model runner that listens beyond loopback refuses to start without an API key. When none is
# given (API_KEYS, API_KEYS_FILE) and unauthenticated access is not asked for, a key is generated on
# the first start into the models volume and used from then on by every container on that volume
# (a pool's replicas share it): `cat /models/.api-keys` in the container shows it.
set -eu

needs_key() {
  [ -z "${API_KEYS:-}" ] && [ -z "${API_KEYS_FILE:-}" ] || return 1
  [ "${ALLOW_UNAUTHENTICATED_REMOTE:-false}" != true ] || return 1
  case ",${SERVICES:-album,runner}," in *,runner,*) ;; *) return 1 ;; esac
  case "${RUNNER_HOST:-127.0.0.1}" in 127.*|localhost|::1|"[::1]") return 1 ;; esac
}

if needs_key; then
  file="${MODELS_PATH:-/models}/.api-keys"
  if [ ! -s "$file" ]; then
    fresh="$file.$$"
    (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$fresh" && echo >>"$fresh") || {
      echo "llamadock: no API key given (API_KEYS or API_KEYS_FILE) and none can be written to $file" >&2
      exit 1
    }
    # A hard link creates the file only if it is still absent: of replicas starting together, the
    # first one's key is everyone's.
    if ln "$fresh" "$file" 2>/dev/null; then
      echo "llamadock: no API key given (API_KEYS or API_KEYS_FILE): generated one into $file (show it with: cat $file, in the container)" >&2
    fi
    rm -f "$fresh"
  fi
  echo "llamadock: API keys from $file" >&2
  export API_KEYS_FILE="$file"
fi
exec "$@"
