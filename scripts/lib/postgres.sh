# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Private, socket-only PostgreSQL clusters for scripts. Source this file.
#
# Same layout and settings as main/server/embedded_cluster.cpp, so either can reuse a
# cluster the other made:
#   DIR/data          PGDATA (initdb: superuser chargeonce, UTF8, trust on
#                     the local socket, no TCP listener)
#   DIR/socket        the only listener, port 5432 (just the socket's name)
#   DIR/postgres.log  server log plus the output of every tool run here
# PostgreSQL refuses to run as root, so as root every tool runs as `postgres`.
# Functions return non-zero on failure and explain why on stderr.

_PG_PORT=5432
_PG_USER=chargeonce
_PG_DB=chargeonce
_PG_MARKER='# chargeonce embedded cluster'

# The bin dir that made DIR's cluster if installed (a newer major cannot open
# it), else the highest installed major.
_pg_bin() {
  local dir=$1 made_by='' best='' d major
  [[ -f $dir/data/PG_VERSION ]] && made_by=$(<"$dir/data/PG_VERSION")
  if [[ -n $made_by && -x /usr/lib/postgresql/$made_by/bin/pg_ctl ]]; then
    echo "/usr/lib/postgresql/$made_by/bin"
    return 0
  fi
  for d in /usr/lib/postgresql/*/bin/pg_ctl; do
    major=${d#/usr/lib/postgresql/}
    major=${major%%/*}
    [[ $major =~ ^[0-9]+$ && -x $d ]] || continue
    if [[ -z $best ]] || ((major > best)); then best=$major; fi
  done
  if [[ -z $best ]]; then
    echo "no PostgreSQL binaries under /usr/lib/postgresql/<N>/bin" \
      "(install the postgresql package)" >&2
    return 1
  fi
  echo "/usr/lib/postgresql/$best/bin"
}

# Runs a command as the cluster's owner, inside DIR (tools complain about an
# unreadable cwd), with a fixed environment: the caller's PG* variables must
# not redirect it, and LC_ALL=C keeps messages in English for the log.
_pg_as() {
  local dir=$1
  shift
  local env_cmd=(env -i PATH=/usr/bin:/bin LC_ALL=C "$@")
  if ((EUID == 0)); then
    (cd "$dir" && exec runuser -u postgres -- "${env_cmd[@]}")
  else
    (cd "$dir" && exec "${env_cmd[@]}")
  fi
}

# Like _pg_as, but output goes to DIR/postgres.log, after the command line.
_pg_run() {
  local dir=$1
  shift
  local status=0
  echo "\$ $*" >>"$dir/postgres.log"
  _pg_as "$dir" "$@" >>"$dir/postgres.log" 2>&1 || status=$?
  echo "# exit $status" >>"$dir/postgres.log"
  return "$status"
}

# Like _pg_run, but a failure also prints the log's tail: the actual cause.
_pg_check() {
  local dir=$1 what=$2
  shift 2
  _pg_run "$dir" "$@" && return 0
  {
    echo "$what failed; tail of $dir/postgres.log:"
    tail -n 20 "$dir/postgres.log"
  } >&2
  return 1
}

# Creates DIR, DIR/socket and the log, owned by whoever runs the server.
_pg_prepare() {
  local dir=$1
  mkdir -p "$dir/socket" || return 1
  # Local connections are trusted, so only the owner may reach the socket.
  chmod 700 "$dir/socket" || return 1
  touch "$dir/postgres.log" || return 1
  if ((EUID == 0)); then
    chown postgres: "$dir" "$dir/socket" "$dir/postgres.log" || return 1
    # Root may enter any directory, postgres may not (e.g. under /root).
    if ! runuser -u postgres -- test -w "$dir"; then
      echo "user postgres cannot reach $dir; make its parents traversable" \
        "(chmod o+x) or put the cluster elsewhere" >&2
      return 1
    fi
  fi
}

# Appends our settings once; checked on every start, so a crash right after
# initdb cannot leave a cluster listening on TCP.
_pg_ensure_config() {
  local conf=$1/data/postgresql.conf
  grep -qF "$_PG_MARKER" "$conf" && return 0
  {
    echo
    echo "$_PG_MARKER: Unix socket only, no TCP."
    echo "listen_addresses = ''"
    echo "port = $_PG_PORT"
    echo "# Relative to the data directory: the cluster can be moved."
    echo "unix_socket_directories = '../socket'"
  } >>"$conf"
}

# Quotes a libpq conninfo value when it needs it (spaces, quotes).
_pg_conninfo_value() {
  local v=$1
  if [[ -z $v || $v =~ [[:space:]\'\\] ]]; then
    v=${v//\\/\\\\}
    v=${v//\'/\\\'}
    v="'$v'"
  fi
  printf '%s' "$v"
}

# Loads pg_stat_statements into the running cluster of DIR (bin dir BIN,
# psql arguments CLIENT...) with pg_stat_statements.track = TRACK, and
# creates the extension in database chargeonce. Loading it takes a restart,
# once: ALTER SYSTEM keeps it for the cluster's later starts. TRACK takes a
# reload only: `all` (what chargeonce-bench --statements wants) counts the
# statements that PL/pgSQL functions run as entries of their own beside the
# call, `top` only the calls, and `none` turns the counting off, so that
# runs that do not read it pay nothing for it.
_pg_ensure_statements() {
  local dir=$1 bin=$2 track=$3
  shift 3
  local psql=(_pg_as "$dir" "$bin/psql" -X -q -t -A -v ON_ERROR_STOP=1 "$@")
  local libs
  libs=$("${psql[@]}" -d postgres -c "SHOW shared_preload_libraries") ||
    return 1
  if [[ ,${libs// /}, != *,pg_stat_statements,* ]]; then
    echo "postgres: loading pg_stat_statements (a restart)" >&2
    libs=${libs:+$libs,}pg_stat_statements
    "${psql[@]}" -d postgres -c \
      "ALTER SYSTEM SET shared_preload_libraries = '$libs'" || return 1
    _pg_check "$dir" "pg_ctl restart" "$bin/pg_ctl" restart -w -t 60 \
      -D "$dir/data" -l "$dir/postgres.log" || return 1
  fi
  local shown i
  shown=$("${psql[@]}" -d postgres -c "SHOW pg_stat_statements.track") ||
    return 1
  if [[ $shown != "$track" ]]; then
    "${psql[@]}" -d postgres -c \
      "ALTER SYSTEM SET pg_stat_statements.track = '$track'" \
      -c "SELECT pg_reload_conf()" >/dev/null || return 1
    # The postmaster rereads the files on its own time; a session started
    # once it has sees the new value, as the server's will.
    for ((i = 0; i < 100; i++)); do
      shown=$("${psql[@]}" -d postgres -c "SHOW pg_stat_statements.track")
      [[ $shown == "$track" ]] && break
      sleep 0.1
    done
    [[ $shown == "$track" ]] || {
      echo "pg_stat_statements.track is still $shown, not $track" >&2
      return 1
    }
  fi
  "${psql[@]}" -d "$_PG_DB" -c "SET client_min_messages = warning" \
    -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}

# pg_cluster_start DIR: creates the cluster if DIR has none, starts it unless
# it already runs (then reuses it), creates database chargeonce if missing,
# and prints the libpq DSN on stdout (nothing else goes to stdout). With
# PG_STAT_STATEMENTS=TRACK (all, top or none) set, it also loads
# pg_stat_statements with that pg_stat_statements.track, restarting the
# cluster if need be (_pg_ensure_statements); unset, the cluster's settings
# stay as they are, so that the tests' clusters pay nothing for it.
pg_cluster_start() {
  if (($# != 1)); then
    echo "usage: pg_cluster_start DIR" >&2
    return 2
  fi
  local dir bin socket exists
  mkdir -p "$1" && dir=$(cd "$1" && pwd) || return 1
  socket=$dir/socket
  # The client connects via the absolute path, which must fit sun_path.
  if ((${#socket} + 15 >= 108)); then
    echo "socket path too long for a Unix socket: $socket/.s.PGSQL.$_PG_PORT" >&2
    return 1
  fi
  _pg_prepare "$dir" || return 1
  bin=$(_pg_bin "$dir") || return 1
  if [[ ! -f $dir/data/PG_VERSION ]]; then
    echo "postgres: initdb $dir/data" >&2
    # --locale=C: sorting must not depend on the host's locales.
    _pg_check "$dir" initdb "$bin/initdb" -D "$dir/data" -U "$_PG_USER" \
      -E UTF8 --locale=C --auth-local=trust --auth-host=reject || return 1
  fi
  _pg_ensure_config "$dir" || return 1
  local client=(-h "$socket" -p "$_PG_PORT" -U "$_PG_USER")
  # Exit 0 means a live postmaster; a stale postmaster.pid from a killed
  # server reads as "not running", and the server discards it on start.
  if _pg_run "$dir" "$bin/pg_ctl" status -D "$dir/data"; then
    echo "postgres: reusing the server already running in $dir" >&2
    _pg_check "$dir" pg_isready "$bin/pg_isready" "${client[@]}" \
      -d postgres -t 30 || return 1
  else
    _pg_check "$dir" "pg_ctl start" "$bin/pg_ctl" start -w -t 60 \
      -D "$dir/data" -l "$dir/postgres.log" || return 1
    echo "postgres: started $dir" >&2
  fi
  exists=$(_pg_as "$dir" "$bin/psql" -X -q -t -A "${client[@]}" -d postgres \
    -c "SELECT 1 FROM pg_database WHERE datname = '$_PG_DB'") || {
    echo "psql failed against $socket" >&2
    return 1
  }
  if [[ $exists != 1 ]]; then
    _pg_check "$dir" createdb "$bin/createdb" "${client[@]}" "$_PG_DB" ||
      return 1
  fi
  if [[ -n ${PG_STAT_STATEMENTS:-} ]]; then
    case $PG_STAT_STATEMENTS in
      all | top | none) ;;
      *)
        echo "PG_STAT_STATEMENTS must be all, top or none," \
          "not '$PG_STAT_STATEMENTS'" >&2
        return 2
        ;;
    esac
    _pg_ensure_statements "$dir" "$bin" "$PG_STAT_STATEMENTS" \
      "${client[@]}" || return 1
  fi
  printf 'host=%s port=%s dbname=%s user=%s connect_timeout=5\n' \
    "$(_pg_conninfo_value "$socket")" "$_PG_PORT" "$_PG_DB" "$_PG_USER"
}

# pg_cluster_stop DIR: fast shutdown if a server runs there; a missing
# directory, cluster or server is not an error (idempotent).
pg_cluster_stop() {
  if (($# != 1)); then
    echo "usage: pg_cluster_stop DIR" >&2
    return 2
  fi
  local dir bin
  [[ -f $1/data/PG_VERSION ]] || return 0
  dir=$(cd "$1" && pwd) || return 1
  bin=$(_pg_bin "$dir") || return 1
  _pg_run "$dir" "$bin/pg_ctl" status -D "$dir/data" || return 0
  _pg_check "$dir" "pg_ctl stop" "$bin/pg_ctl" stop -w -m fast \
    -D "$dir/data" || return 1
  echo "postgres: stopped $dir" >&2
}

# pg_schema_apply DIR DSN: applies what migrate() applies to an empty
# database, in its order, with psql: every versioned migration
# (persistence/migrations), then every function file (persistence/functions)
# in one transaction. Without migrate()'s bookkeeping tables: for schema.sql,
# the SQL checks and the pgTAP suite, which do not need the server built.
pg_schema_apply() {
  if (($# != 2)); then
    echo "usage: pg_schema_apply DIR DSN" >&2
    return 2
  fi
  local dir=$1 dsn=$2 root bin f
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || return 1
  bin=$(_pg_bin "$dir") || return 1
  for f in "$root"/persistence/migrations/*.sql; do
    "$bin/psql" -X -q -v ON_ERROR_STOP=1 --single-transaction -d "$dsn" \
      -f "$f" >/dev/null || {
      echo "psql: applying $f failed" >&2
      return 1
    }
  done
  cat "$root"/persistence/functions/*.sql |
    "$bin/psql" -X -q -v ON_ERROR_STOP=1 --single-transaction -d "$dsn" \
      >/dev/null || {
    echo "psql: applying persistence/functions failed" >&2
    return 1
  }
}

# pg_schema_dump DIR DSN: the schema as persistence/schema.sql holds it:
# pg_dump --schema-only without the bookkeeping tables, the random
# \restrict keys of newer pg_dumps and the version lines (a minor upgrade of
# Postgres changes nothing there).
pg_schema_dump() {
  if (($# != 2)); then
    echo "usage: pg_schema_dump DIR DSN" >&2
    return 2
  fi
  local bin
  bin=$(_pg_bin "$1") || return 1
  "$bin/pg_dump" --schema-only --no-owner \
    --exclude-table=schema_migrations --exclude-table=schema_functions \
    -d "$2" | grep -v -e '^\\restrict ' -e '^\\unrestrict ' \
    -e '^-- Dumped from database version' -e '^-- Dumped by pg_dump version'
}
