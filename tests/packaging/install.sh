#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` into a temporary prefix, then checks what an operator
# gets: the binaries, the migrations, an example config naming every server
# option (and loading: as installed, and with every option uncommented), a
# systemd unit with its hardening (`systemd-analyze verify` when available),
# and an installed server that answers the installed CLI.
#
# usage: install.sh CMAKE BUILD_DIR SOURCE_DIR
# Needs jq and CHARGEONCE_TEST_DSN (fails without it). The temp dir is made
# under $PWD (ctest: the build dir).
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 3)) || die "usage: install.sh CMAKE BUILD_DIR SOURCE_DIR"
cmake=$1
build=$(realpath "$2")
source_dir=$(realpath "$3")
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
[[ -n ${CHARGEONCE_TEST_DSN:-} ]] \
  || die "CHARGEONCE_TEST_DSN is not set (scripts/test sets it)"

tmp=$(mktemp -d "$PWD/install.XXXXXX")
on_exit_remove "$tmp"
prefix=$tmp/prefix

# -- the files ----------------------------------------------------------------

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" \
  || die "cmake --install: $(cat "$tmp/install.log")"

binaries=(chargeonce-server chargeonce-cli chargeonce-bench)
[[ -x $build/main/chargeonce-chaos ]] && binaries+=(chargeonce-chaos)
for bin in "${binaries[@]}"; do
  [[ -x $prefix/bin/$bin ]] || die "bin/$bin not installed"
done

shopt -s nullglob
migrations=("$source_dir"/persistence/migrations/*.sql)
((${#migrations[@]} > 0)) || die "no migrations in the source tree"
for sql in "${migrations[@]}"; do
  cmp -s "$sql" "$prefix/share/chargeonce/migrations/$(basename "$sql")" \
    || die "migration $(basename "$sql") missing or different"
done

conf=$prefix/etc/chargeonce/chargeonce.conf
unit=$prefix/lib/systemd/system/chargeonce-server.service
for f in "$conf" "$unit" "$prefix/share/doc/chargeonce/README.md" \
  "$prefix/share/doc/chargeonce/prometheus/alerts.yml" \
  "$prefix/share/doc/chargeonce/grafana/chargeonce.json"; do
  [[ -f $f ]] || die "${f#"$prefix"/} not installed"
done

# -- the example config names every option ------------------------------------

# `(-p|--port) <uint16>` and `--name=<type>` lines of the global group; CAF's
# own switches are not server options.
options=$("$prefix/bin/chargeonce-server" --help 2>&1 \
  | sed -nE 's/^ +(\(-[a-z?]\|)?--([a-z0-9-]+).*/\2/p' \
  | grep -vxE 'help|long-help|dump-config|config-file')
[[ $(wc -l <<<"$options") -ge 30 ]] || die "could not read --help: $options"
for name in $options; do
  grep -qE "^;?$name=" "$conf" || die "chargeonce.conf does not list '$name'"
done
# CAF ignores unknown keys: a misspelt name in the example would go unseen.
while read -r name; do
  case $name in
  max-threads | policy | heartbeat-interval | workers) ;; # [scheduler], [middleman]
  *) grep -qxF "$name" <<<"$options" || die "chargeonce.conf: unknown '$name'" ;;
  esac
done < <(sed -nE 's/^;?([a-z][a-z0-9-]*)=.*/\1/p' "$conf")

# -- the systemd unit ----------------------------------------------------------

configured_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' \
  "$build/CMakeCache.txt")
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ $exec_start == "$configured_prefix/bin/chargeonce-server --config-file="*/etc/chargeonce/chargeonce.conf ]] \
  || die "unexpected ExecStart: $exec_start"
for key in User=chargeonce NoNewPrivileges=yes ProtectSystem=strict \
  ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
  ProtectKernelTunables=yes ProtectKernelModules=yes \
  "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" \
  MemoryDenyWriteExecute=yes LockPersonality=yes StateDirectory=chargeonce \
  KillSignal=SIGTERM Restart=on-failure; do
  grep -qxF "$key" "$unit" || die "the unit lacks $key"
done
if command -v systemd-analyze >/dev/null; then
  # Verified as installed, but with ExecStart at the staged binary: verify
  # insists that the executable exists.
  mkdir "$tmp/unit"
  sed "s#^ExecStart=[^ ]*#ExecStart=$prefix/bin/chargeonce-server#" "$unit" \
    >"$tmp/unit/chargeonce-server.service"
  systemd-analyze verify --man=no "$tmp/unit/chargeonce-server.service" \
    >"$tmp/verify.log" 2>&1 || die "systemd-analyze verify: $(cat "$tmp/verify.log")"
  # verify exits 0 on some warnings: none may concern our unit.
  if grep -q 'chargeonce-server.service' "$tmp/verify.log"; then
    die "systemd-analyze verify: $(cat "$tmp/verify.log")"
  fi
else
  echo "install: systemd-analyze not found, unit syntax not verified"
fi

# -- the installed server with the installed config ----------------------------

# Options the config file sets are reported by --dump-config: the file is
# really read (CAF ignores a missing default file, not a named one).
"$prefix/bin/chargeonce-server" --config-file="$conf" --dump-config \
  >"$tmp/dump" 2>&1 || die "--dump-config: $(cat "$tmp/dump")"
grep -qF 'host=/run/postgresql dbname=chargeonce' "$tmp/dump" \
  || die "the config's postgres= was not read: $(cat "$tmp/dump")"

# Run in $tmp: the config's relative paths (data-dir) stay there.
server_bin=$prefix/bin/chargeonce-server server_dir=$tmp
start_server "$tmp/installed" --config-file="$conf" \
  --postgres="$CHARGEONCE_TEST_DSN" --port=0
cli=("$prefix/bin/chargeonce-cli" --server="127.0.0.1:$server_port"
  --timeout="$cli_timeout")
chat=$(random_chat)
"${cli[@]}" create-chat --chat="$chat" --balance=2 >"$tmp/create" \
  || die "create-chat: $(cat "$tmp/create")"
[[ $("${cli[@]}" status --chat="$chat" | jq .balance) == 2 ]] \
  || die "status did not show the created chat"
kill -TERM "$server_pid"
wait_gone "$server_pid" 30 || die "server did not stop on SIGTERM"

# Every option uncommented, at its documented default: each name and value
# must parse, and together they must pass the server's own checks.
sed -E 's/^;([a-z][a-z0-9-]*=|\[[a-z]+\]$)/\1/' "$conf" >"$tmp/all.conf"
[[ $(grep -cE '^[a-z][a-z0-9-]*=' "$tmp/all.conf") -gt $(wc -l <<<"$options") ]] \
  || die "uncommenting did not enable every option"
# CAF drops a value of the wrong type without a word: each option must come
# back in the merged configuration.
"$prefix/bin/chargeonce-server" --config-file="$tmp/all.conf" --dump-config \
  >"$tmp/dump.all" 2>&1 || die "--dump-config: $(cat "$tmp/dump.all")"
for name in $options; do
  grep -qE "^$name = " "$tmp/dump.all" \
    || die "chargeonce.conf: the value of '$name' was not accepted"
done
start_server "$tmp/uncommented" --config-file="$tmp/all.conf" \
  --postgres="$CHARGEONCE_TEST_DSN" --port=0
cli=("$prefix/bin/chargeonce-cli" --server="127.0.0.1:$server_port"
  --timeout="$cli_timeout")
[[ $("${cli[@]}" status --chat="$chat" | jq .balance) == 2 ]] \
  || die "the server with every option set did not answer"
kill -TERM "$server_pid"
wait_gone "$server_pid" 30 || die "server did not stop on SIGTERM"

echo "install: OK (${#binaries[@]} binaries, ${#migrations[@]} migrations)"
