#!/bin/sh
# First start: a cluster in $PGDATA with the superuser POSTGRES_USER (default postgres),
# its password POSTGRES_PASSWORD, and the database POSTGRES_DB (default: the user's name),
# reachable from other hosts with POSTGRES_HOST_AUTH_METHOD (default scram-sha-256), as
# the official image does. Later starts use the cluster as it is. Then runs the command.
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo "postgres: set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then pwopt="--pwfile=$pwfile"; else pwopt=""; fi
  # shellcheck disable=SC2086  # $pwopt is one word or none
  initdb --pgdata="$PGDATA" --username="$user" $pwopt --encoding=UTF8 --auth-local=trust --auth-host="$auth" >/dev/null
  rm -f "$pwfile"
  echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\" OWNER \"$user\"" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "postgres: created $PGDATA with user $user and database $db" >&2
fi
exec "$@"
