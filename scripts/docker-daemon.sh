#!/usr/bin/env bash
# The Docker engine for the container tests (tests/integration/containers), as CI runs it.
#   scripts/docker-daemon.sh start   installs docker.io, docker-compose (Compose v1, what
#                                    Debian bookworm has) and debootstrap with apt-get when
#                                    missing, starts dockerd in the background unless one
#                                    answers already, and waits until it answers
#   scripts/docker-daemon.sh stop    stops the dockerd that `start` started (none other)
# The daemon runs with the flags that work on a machine without iptables or a default
# bridge: containers use user-defined bridge networks (compose's, the tests' own) or
# another container's network. Its log and pid are in ROWGATE_DOCKER_CACHE (.rowgate/docker).
# Exit status of start: 0 when a daemon answers, 1 (with the reason) when none can run here.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE="${ROWGATE_DOCKER_CACHE:-.rowgate/docker}"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
WAIT_SECONDS="${ROWGATE_DOCKERD_WAIT:-120}"

say() { printf 'docker-daemon: %s\n' "$*" >&2; }
answers() { docker info >/dev/null 2>&1; }
have_compose() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; }

install_missing() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  have_compose || missing+=(docker-compose)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ "${#missing[@]}" -eq 0 ] && return 0
  say "installing ${missing[*]} with apt-get"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

start() {
  mkdir -p "$STATE"
  if ! install_missing; then
    say "cannot install the Docker engine here"
    return 1
  fi
  if answers; then
    say "a Docker daemon answers already; using it"
    return 0
  fi
  say "starting dockerd (log: $LOG)"
  setsid dockerd --iptables=false --ip6tables=false --bridge=none \
    --exec-opt native.cgroupdriver=cgroupfs >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local waited=0
  until answers; do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      say "dockerd exited:"
      tail -n 20 "$LOG" >&2
      rm -f "$PIDFILE"
      return 1
    fi
    if [ "$waited" -ge "$WAIT_SECONDS" ]; then
      say "dockerd did not answer within ${WAIT_SECONDS}s:"
      tail -n 20 "$LOG" >&2
      stop
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  say "dockerd answers ($(docker info --format '{{.ServerVersion}}'), after ${waited}s)"
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid
  pid="$(cat "$PIDFILE")"
  rm -f "$PIDFILE"
  kill -0 "$pid" 2>/dev/null || return 0
  say "stopping dockerd ($pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 1
  done
  say "dockerd ($pid) did not stop in 60s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
