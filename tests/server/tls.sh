#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mutual TLS on the role ports: a client with a certificate from the cluster
# CA is served; a plain client and a client from another CA are refused
# before any message is processed, and nothing changes.
# Usage: tls.sh SERVER CLI DEV_CERTS   (needs CHARGEONCE_TEST_DSN)
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

server_bin=$1
cli=$2
dev_certs=$3

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"

tmp=$(mktemp -d "$PWD/tls.XXXXXX")
on_exit_remove "$tmp"

"$dev_certs" "$tmp/certs" >/dev/null
certs=$tmp/certs

start_server "$tmp/server" --postgres="$CHARGEONCE_TEST_DSN" --port=0 \
  --gateway-port=0 --log-level=debug --worker-port=0 --admin-port=0 \
  --tls-cert="$certs/server.pem" --tls-key="$certs/server.key" \
  --tls-ca="$certs/ca.pem"
gateway=$(port_of gateway)
admin=$(port_of admin)

trusted=(--tls --ca="$certs/ca.pem" --cert="$certs/client.pem" --key="$certs/client.key"
  --timeout="$cli_timeout")
rogue=(--tls --ca="$certs/ca.pem" --cert="$certs/rogue.pem" --key="$certs/rogue.key")
chat=$((RANDOM * 32768 + RANDOM + 100000000000))

echo "tls: a client of the cluster CA is served"
"$cli" --server="127.0.0.1:$admin" "${trusted[@]}" create-chat --chat=$chat \
  --balance=3 >/dev/null || die "trusted create-chat failed"
out=$("$cli" --server="127.0.0.1:$gateway" "${trusted[@]}" status --chat=$chat)
[[ $(jq .balance <<<"$out") == 3 ]] || die "trusted status: $out"

# A client that got no answer within --timeout counts as refused too (the
# CLI says "connection" either way), so the 5 s cannot fail the test; what
# a refused client sent must still have changed nothing (checked below).
expect_refused() {
  local what=$1
  shift
  local rc=0
  out=$("$cli" --timeout=5 "$@" 2>/dev/null) || rc=$?
  [[ $rc == 2 ]] || die "$what: exit $rc, expected 2: $out"
  [[ $(jq -r .error <<<"$out") == connection ]] || die "$what: $out"
  echo "tls: $what refused: $(jq -r .message <<<"$out")"
}

expect_refused "plain client" --server="127.0.0.1:$admin" \
  top-up --chat=$chat --credits=100 --payment-id="plain-$chat"
expect_refused "client of another CA" --server="127.0.0.1:$admin" \
  "${rogue[@]}" top-up --chat=$chat --credits=100 --payment-id="rogue-$chat"
expect_refused "client of another CA on the gateway port" \
  --server="127.0.0.1:$gateway" "${rogue[@]}" reserve --chat=$chat --kind=image


out=$("$cli" --server="127.0.0.1:$gateway" "${trusted[@]}" status --chat=$chat)
[[ $(jq .balance <<<"$out") == 3 && $(jq .reservation <<<"$out") == null ]] \
  || die "refused clients changed something: $out"
grep -q "top_up\|reserve ok chat=$chat" "$tmp/server.log" \
  && die "a refused client's message was processed"

stop_server "$server_pid"
echo "tls: passed"
