#!/usr/bin/env bash
# Builds every image the container tests and the compose stack need without a container
# registry, and prints the settings that point compose at them (KEY=VALUE lines on stdout;
# `eval "$(scripts/docker-images.sh)"` exports them). Progress goes to stderr.
#
#   base images  debootstrap --variant=minbase from the Debian mirror this machine's apt
#                uses (or DEBIAN_MIRROR), one root file system per image kind, each turned
#                into an image with `docker import`:
#                  python    python3 + python3-venv (Debian's Python 3.11) for the proxy image
#                  jre       openjdk-17-jre-headless + python3 for the Spark Connect image
#                  postgres  postgresql-15 for the policy store
#   wheelhouse   `pip wheel` of the project's dependencies at the versions constraints.txt
#                pins (pyspark included), on the host, wrapped in a FROM-scratch image
#   images       rowgate (docker/Dockerfile), Spark Connect 4.3 from the pinned pyspark's
#                jars (docker/offline/spark.Dockerfile), PostgreSQL 15
#                (docker/offline/postgres.Dockerfile)
#
# Cached, so a second run is offline and takes seconds: each base and the wheelhouse is
# tagged with a hash of what it is made of (its packages; constraints.txt and the
# dependencies pyproject.toml declares) and is built only when no image with that tag
# exists; the root file systems (tarballs) and the wheelhouse are also kept in ROWGATE_DOCKER_CACHE (default .rowgate/docker), so a
# pruned Docker is refilled without the network. `--no-cache-files` skips those copies.
#
# Environment: DEBIAN_MIRROR, DEBIAN_RELEASE (bookworm), PYTHON (.venv/bin/python),
# ROWGATE_DOCKER_CACHE, ROWGATE_IMAGE (tag of the proxy image, rowgate-local/rowgate:test).
set -euo pipefail
cd "$(dirname "$0")/.."

RELEASE="${DEBIAN_RELEASE:-bookworm}"
CACHE="${ROWGATE_DOCKER_CACHE:-.rowgate/docker}"
PYTHON="${PYTHON:-.venv/bin/python}"
ROWGATE_IMAGE="${ROWGATE_IMAGE:-rowgate-local/rowgate:test}"
SPARK_IMAGE="${SPARK_IMAGE:-rowgate-local/spark:4.3.0}"
POSTGRES_IMAGE="${POSTGRES_IMAGE:-rowgate-local/postgres:15}"
KEEP_FILES=1
[ "${1:-}" = "--no-cache-files" ] && KEEP_FILES=0
# The classic builder: BuildKit's RUN steps need a bridge network, which the daemon CI
# starts (--bridge=none) has not; the Dockerfiles need nothing BuildKit-only.
export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}"

log() { printf 'docker-images: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
# Exit 3: this machine cannot build or run containers (the tests skip, saying this line).
cannot() { log "$*"; exit 3; }
hash_of() { sha256sum | cut -c1-12; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
# quiet unless it fails: the build log is printed then (RUN_FAILED=cannot: exit 3)
run_logged() {
  local out
  out="$(mktemp)"
  if ! "$@" >"$out" 2>&1; then
    tail -n 60 "$out" >&2
    rm -f "$out"
    "${RUN_FAILED:-die}" "failed: $*"
  fi
  rm -f "$out"
}

command -v docker >/dev/null || cannot "docker is not installed"
docker info >/dev/null 2>&1 || cannot "the Docker daemon does not answer"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"

# -- the Debian mirror apt uses here -------------------------------------------------------
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local f
  # deb822 sources: the URIs of the stanza whose Suites name the release itself
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v rel="$RELEASE" '
      /^[[:space:]]*$/ { if (uri && ok) { print uri; exit } uri = ""; ok = 0; next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == rel) ok = 1 }
      END { if (uri && ok) print uri }' "$f"
  done | head -n1 | grep . && return
  # one-line sources: deb URI RELEASE main
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk -v rel="$RELEASE" '$1 == "deb" { u = $2; s = $3; if ($2 ~ /^\[/) { u = $3; s = $4 } if (s == rel) { print u; exit } }'
}

# -- base images ---------------------------------------------------------------------------
# base NAME PACKAGES: prints the image tag, building it when missing
base_image() {
  local name="$1" packages="$2"
  local key tag tarball root mirror
  key="$(printf '%s\n' "$RELEASE" "$packages" "minbase-v1" | hash_of)"
  tag="rowgate-local/$name:$RELEASE-$key"
  if have_image "$tag"; then
    echo "$tag"
    return
  fi
  tarball="$CACHE/base-$name-$RELEASE-$key.tar"
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
    mirror="$(debian_mirror)"
    [ -n "$mirror" ] || cannot "no Debian mirror for $RELEASE in /etc/apt/sources.list*; set DEBIAN_MIRROR"
    root="$CACHE/root-$name.tmp"
    rm -rf "$root"
    mkdir -p "$CACHE/debs"
    log "debootstrap $RELEASE ($name: $packages)"
    RUN_FAILED=cannot run_logged debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include="$packages" "$RELEASE" "$root" "$mirror"
    # what an image does not need: package lists and archives, documentation
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/man/* "$root"/usr/share/info/*
    find "$root/usr/share/doc" -type f ! -name copyright -delete
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    rm -f "$CACHE/base-$name-"*.tar  # older ones
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "docker import $tag"
  docker import --change 'ENV LANG=C.UTF-8' --message "debootstrap --variant=minbase $RELEASE + $packages" \
    "$tarball" "$tag" >/dev/null
  [ "$KEEP_FILES" = 1 ] || rm -f "$tarball"
  # older bases of the same kind
  docker image ls --format '{{.Repository}}:{{.Tag}}' "rowgate-local/$name" | grep -vx "$tag" | xargs -r docker image rm >/dev/null 2>&1 || true
  echo "$tag"
}

# -- wheelhouse ----------------------------------------------------------------------------
wheels_image() {
  local key tag dir tmp
  [ -x "$PYTHON" ] || die "$PYTHON not found: run scripts/bootstrap.sh (or set PYTHON)"
  # what the wheels depend on: the pins and the project's declared dependencies
  key="$({ cat constraints.txt; "$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"])'; } | hash_of)"
  tag="rowgate-local/wheels:$key"
  if have_image "$tag"; then
    echo "$tag"
    return
  fi
  dir="$CACHE/wheels-$key"
  if [ ! -d "$dir" ]; then
    tmp="$dir.tmp"
    rm -rf "$tmp"
    log "pip wheel: the pinned dependencies into $dir"
    # `.`: everything rowgate needs at the pinned versions; setuptools: what builds it in
    # the image. rowgate's own wheel is dropped: the image builds it from its sources.
    run_logged "$PYTHON" -m pip wheel --quiet --wheel-dir "$tmp" --constraint constraints.txt . setuptools
    rm -f "$tmp"/rowgate-*.whl
    for old in "$CACHE"/wheels-*; do [ "$old" = "$tmp" ] || rm -rf "$old"; done  # older ones
    mv "$tmp" "$dir"
  fi
  log "wheelhouse image $tag"
  printf 'FROM scratch\nCOPY . /\n' | run_logged docker build --quiet -t "$tag" -f - "$dir"
  [ "$KEEP_FILES" = 1 ] || rm -rf "$dir"
  docker image ls --format '{{.Repository}}:{{.Tag}}' rowgate-local/wheels | grep -vx "$tag" | xargs -r docker image rm >/dev/null 2>&1 || true
  echo "$tag"
}

PYTHON_BASE="$(base_image python python3,python3-venv,python-is-python3)"
JRE_BASE="$(base_image jre openjdk-17-jre-headless,python3,python3-venv)"
POSTGRES_BASE="$(base_image postgres postgresql-15)"
WHEELS="$(wheels_image)"
RUN_FAILED=cannot run_logged docker run --rm --network none "$PYTHON_BASE" true

# build TAG DOCKERFILE CONTEXT BUILD-ARGS...: the build stage is tagged too (TAG-build), so
# the classic builder's cache of it is no dangling image and survives the prune below.
build() {
  local tag="$1" dockerfile="$2" context="$3" args=()
  shift 3
  for arg in "$@"; do args+=(--build-arg "$arg"); done
  log "build $tag ($dockerfile)"
  if grep -q '^FROM .* AS build$' "$dockerfile"; then
    run_logged docker build -f "$dockerfile" "${args[@]}" --target build -t "$tag-build" "$context"
  fi
  run_logged docker build -f "$dockerfile" "${args[@]}" -t "$tag" "$context"
}
build "$ROWGATE_IMAGE" docker/Dockerfile . "BASE_IMAGE=$PYTHON_BASE" "WHEELS=$WHEELS"
build "$SPARK_IMAGE" docker/offline/spark.Dockerfile . "BASE_IMAGE=$JRE_BASE" "WHEELS=$WHEELS"
build "$POSTGRES_IMAGE" docker/offline/postgres.Dockerfile docker/offline "BASE_IMAGE=$POSTGRES_BASE"
# images of earlier builds (untagged by these): the caches in use are tagged
docker image prune --force >/dev/null 2>&1 || true

# What compose reads (docker/compose.yaml): the proxy is built from the same base and wheels.
cat <<EOF
ROWGATE_BASE_IMAGE=$PYTHON_BASE
ROWGATE_WHEELS=$WHEELS
ROWGATE_IMAGE=$ROWGATE_IMAGE
SPARK_IMAGE=$SPARK_IMAGE
POSTGRES_IMAGE=$POSTGRES_IMAGE
EOF
