#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A server selling an operator's catalog (catalog=PATH): voice from a daily
# voice quota, then 3 credits; video from credits only, at 5. The CLI's
# create-chat --pocket=NAME=N and HTTP's "pockets" set any pocket, status
# shows every pocket, reserve --kind takes the catalog's kinds and names
# them when it gets another. Then a server whose catalog drops a kind the
# ledger still names refuses to start. On a database of its own in the
# test cluster: the kinds it records must not reach the shared one.
# Usage: catalog.sh SERVER CLI CONFIGURATION_MD   (needs CHARGEONCE_TEST_DSN, psql, curl, jq)
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

server_bin=$1
cli=$2
products_doc=$3

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"

ok() { echo "catalog: ok: $*"; }

tmp=$(mktemp -d "$PWD/catalog.XXXXXX")
on_exit_remove "$tmp"

db=chargeonce_catalog_sh_$$
psql "$CHARGEONCE_TEST_DSN" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)"
psql "$CHARGEONCE_TEST_DSN" -qAtc "CREATE DATABASE $db"
on_exit_run psql "$CHARGEONCE_TEST_DSN" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)"
dsn="$CHARGEONCE_TEST_DSN dbname=$db" # libpq: the last dbname wins

# The catalog of tests/persistence/catalog.cpp.
catalog=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../persistence/fixtures/voice_video_catalog.json")

token() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
ad=$(token admin)
start_server "$tmp/server" --postgres="$dsn" --port=0 --http-port=0 \
  --http-admin-token="$ad" --catalog="$catalog"
server_pid_a=$server_pid
server="127.0.0.1:$server_port"
base="http://127.0.0.1:$(port_of http)"

out=""
# Runs the CLI; its JSON answer in $out, which must satisfy the jq filter.
cli_ok() { # what filter cli-args...
  local what=$1 filter=$2
  shift 2
  out=$("$cli" --server="$server" --timeout="$cli_timeout" "$@") \
    || die "$what: exit $?: $out"
  jq -e "$filter" <<<"$out" >/dev/null || die "$what: $out"
}
cli_refused() { # what error cli-args...
  local what=$1 error=$2 rc=0
  shift 2
  out=$("$cli" --server="$server" --timeout="$cli_timeout" "$@") || rc=$?
  ((rc == 1)) || die "$what: exit $rc, expected 1: $out"
  [[ $(jq -r .error <<<"$out") == "$error" ]] || die "$what: $out"
}

chat=$(random_chat)
cli_ok "create-chat --pocket" \
  '.pockets.daily_voice == 1 and .balance == 8 and .pockets.balance == 8
   and .pockets.daily_messages == 0' \
  create-chat --chat="$chat" --pocket=daily_voice=1 --balance=8
cli_ok "reserve voice" \
  '.held.daily_voice == 1 and .held.balance == 0 and .queue == "voice_generation"' \
  reserve --chat="$chat" --kind=voice
id=$(jq -r .id <<<"$out")
cli_ok "start voice" '.status == "in_progress"' start --chat="$chat" --reservation="$id"
cli_ok "commit voice" '.charged.daily_voice == 1 and .charged.balance == 0 and .kind == "voice"' \
  commit --chat="$chat" --reservation="$id"
cli_ok "reserve voice from balance" '.held.balance == 3 and (.held.daily_voice // 0) == 0' \
  reserve --chat="$chat" --kind=voice
cli_ok "fail it" '.held.balance == 3' \
  fail --chat="$chat" --reservation="$(jq -r .id <<<"$out")"
cli_ok "reserve video" '.held.balance == 5 and .queue == "video_render"' \
  reserve --chat="$chat" --kind=video
cli_ok "status" '.pockets == {"daily_messages": 0, "daily_voice": 0, "balance": 8}
   and .available.balance == 3 and .reservation.kind == "video"' \
  status --chat="$chat"
cli_ok "cancel video" '.kind == "video"' cancel --chat="$chat"
cli_refused "reserve image" invalid_argument reserve --chat="$chat" --kind=image
[[ $(jq -r .message <<<"$out") == *"text, video, voice"* ]] || die "reserve image: $out"
cli_refused "create-chat with a pocket the catalog lacks" invalid_argument \
  create-chat --chat="$(random_chat)" --pocket=daily_images=1
[[ $(jq -r .message <<<"$out") == *"unknown pocket daily_images"* ]] \
  || die "unknown pocket: $out"
ok "CLI: --pocket, reserve of voice and video at their prices, status of every pocket"

# Units at the catalog's prices: 4 voice units with 2 daily voice and 9
# credits hold 2 daily voice and 2 x 3 credits; 3 of them are charged, daily
# voice first, and one unit's 3 credits released.
chat=$(random_chat)
cli_ok "create-chat for units" '.pockets.daily_voice == 2 and .balance == 9' \
  create-chat --chat="$chat" --pocket=daily_voice=2 --balance=9
cli_refused "reserve 4 voice units beyond the pockets" insufficient_funds \
  reserve --chat="$chat" --kind=voice --units=6
cli_ok "reserve 4 voice units" \
  '.units == 4 and .held.daily_voice == 2 and .held.balance == 6' \
  reserve --chat="$chat" --kind=voice --units=4
id=$(jq -r .id <<<"$out")
cli_ok "start them" '.status == "in_progress"' start --chat="$chat" --reservation="$id"
cli_refused "commit more units than held" invalid_argument \
  commit --chat="$chat" --reservation="$id" --units=5
cli_ok "commit 3 of the 4 units" \
  '.units == 3 and .charged.daily_voice == 2 and .charged.balance == 3
   and .released.balance == 3' \
  commit --chat="$chat" --reservation="$id" --units=3
cli_ok "a retry names other units: the first receipt" \
  '.units == 3 and .charged.balance == 3' \
  commit --chat="$chat" --reservation="$id" --units=4
cli_ok "status after the partial commit" \
  '.pockets.daily_voice == 0 and .balance == 6 and .reservation == null' \
  status --chat="$chat"
ok "CLI: reserve --units split at the catalog's prices, commit --units releases the rest"

post() { # body -> prints status code; the body in $tmp/http.out
  curl -s -o "$tmp/http.out" -w '%{http_code}' -H "Authorization: Bearer $ad" \
    -H 'Content-Type: application/json' -d "$1" "$base/v1/chats"
}
other=$(random_chat)
code=$(post "{\"chat\":$other,\"balance\":1,\"pockets\":{\"daily_voice\":2}}")
[[ $code == 201 ]] && jq -e '.pockets == {"daily_messages": 0, "daily_voice": 2, "balance": 1}' \
  "$tmp/http.out" >/dev/null || die "POST pockets: $code $(cat "$tmp/http.out")"
code=$(post "{\"chat\":$(random_chat),\"pockets\":{\"daily_images\":1}}")
[[ $code == 422 ]] && jq -e '.error == "invalid_argument"' "$tmp/http.out" >/dev/null \
  || die "POST unknown pocket: $code $(cat "$tmp/http.out")"
code=$(post "{\"chat\":$(random_chat),\"balance\":1,\"pockets\":{\"balance\":2}}")
[[ $code == 422 ]] && jq -e '.message | test("balance given twice")' "$tmp/http.out" >/dev/null \
  || die "POST balance twice: $code $(cat "$tmp/http.out")"
code=$(post "{\"chat\":$(random_chat),\"pockets\":{\"daily_voice\":-1}}")
[[ $code == 422 ]] || die "POST negative pocket: $code $(cat "$tmp/http.out")"
ok "HTTP: POST /v1/chats with pockets; unknown, repeated and negative pockets are 422"

stop_server "$server_pid_a"
rc=0
"$server_bin" --postgres="$dsn" --port=0 >"$tmp/builtin.log" 2>&1 || rc=$?
((rc == 1)) || die "a server dropping voice and video exited $rc, expected 1: $(tail -n 3 "$tmp/builtin.log")"
grep -q "kind voice has 0 active reservations and 2 ledger rows" "$tmp/builtin.log" \
  || die "the refusal does not name voice's 2 ledger rows: $(tail -n 3 "$tmp/builtin.log")"
grep -q "kind video" "$tmp/builtin.log" \
  && die "video (never charged) is named in the refusal: $(tail -n 3 "$tmp/builtin.log")"
ok "a server whose catalog drops voice (charged once) refuses to start, naming it"

# The example catalog of docs/configuration.md ("Your own products", which
# the README points to) is one a server takes (finalize reads the file
# before printing the default; a refused catalog exits 2).
sed -n '/^## Your own products/,/^## /p' "$products_doc" \
  | sed -n '/^```json$/,/^```$/p' | sed '1d;$d' >"$tmp/example-catalog.json"
[[ -s $tmp/example-catalog.json ]] || die "no json block under configuration.md's 'Your own products'"
"$server_bin" --catalog="$tmp/example-catalog.json" --print-default-catalog >/dev/null 2>"$tmp/example.err" \
  || die "configuration.md's example catalog is refused: $(cat "$tmp/example.err")"
ok "configuration.md's example catalog is valid"
