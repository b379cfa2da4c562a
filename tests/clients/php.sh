#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The PHP client package (clients/php) end to end: its composer.json is
# valid, its autoloader builds offline, and its PHPUnit suite passes: the
# unit tests (retry policy, auto request ids, errors, SSE, with a fake
# transport) and the integration tests against a real chargeonce-server
# started here with HTTP and the three role tokens (every route, typed
# results, the error classes, retries after lost answers that hold and
# charge once, the event stream and resuming it).
#
# usage: php.sh SERVER SOURCE_DIR   (needs php 8.2 with curl, composer and
# phpunit, Debian's; fails, never skips, without them). The server runs on
# its own database in the CHARGEONCE_TEST_DSN cluster if that is set (CTest
# gives every entry a database of its own), else on an embedded cluster in
# the temp dir. Takes about 10 s.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 2)) || die "usage: php.sh SERVER SOURCE_DIR"
server_bin=$(realpath "$1")
src=$(realpath "$2")
started=$(now_us)

ok() { echo "php: ok: $*"; }

for tool in php composer phpunit; do
  command -v "$tool" >/dev/null || die "$tool is required (scripts/install-deps)"
done
php -r 'exit(PHP_VERSION_ID >= 80200 && extension_loaded("curl") ? 0 : 1);' \
  || die "PHP 8.2 or newer with the curl extension is required (php-cli, php-curl)"

# Under $PWD (ctest: the build dir), not /tmp: as root an embedded cluster
# runs as `postgres`, which must reach it.
tmp=$(mktemp -d "$PWD/php.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"

# -- the package ----------------------------------------------------------------

# A copy: dump-autoload writes vendor/ into the package, and the source tree
# is left as it is. No network: the package requires nothing but PHP's own.
cp -r "$src/clients/php" "$tmp/package"
rm -rf "$tmp/package/vendor"
export COMPOSER_HOME=$tmp/composer-home COMPOSER_DISABLE_NETWORK=1 \
  COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_NO_INTERACTION=1
(cd "$tmp/package" && composer validate --no-check-publish --no-check-lock --strict) \
  >"$tmp/composer.log" 2>&1 || die "composer validate: $(cat "$tmp/composer.log")"
(cd "$tmp/package" && composer dump-autoload --dev) >>"$tmp/composer.log" 2>&1 \
  || die "composer dump-autoload: $(cat "$tmp/composer.log")"
ok "composer.json is valid; the autoloader builds offline"

# -- the server -----------------------------------------------------------------

token() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
for role in gateway worker admin; do
  token "$role" >"$tmp/$role.token" # files: a command line is visible in ps
done
if [[ -n ${CHARGEONCE_TEST_DSN:-} ]]; then
  database=(--postgres="$CHARGEONCE_TEST_DSN")
else
  socket="$tmp/pg/socket/.s.PGSQL.5432"
  ((${#socket} <= 107)) || die "the working dir is too deep for a Unix socket: $socket"
  database=(--data-dir="$tmp/pg")
  on_exit_stop_postgres "$tmp/pg/data"
fi
# tests/Integration/IntegrationTestCase.php relies on these timers.
start_server "$tmp/server" "${database[@]}" --port=0 --http-port=0 \
  --http-gateway-token-file="$tmp/gateway.token" \
  --http-worker-token-file="$tmp/worker.token" \
  --http-admin-token-file="$tmp/admin.token" \
  --queue-notice-delay=1s --lease-duration=3s --sweep-interval=1s \
  --http-threads=16 --http-max-streams=8
port=$(port_of http)
[[ -n $port ]] || die "no http= line in the port file: $(cat "$server_port_file")"
echo "php: server pid $server_pid, HTTP on 127.0.0.1:$port" \
  "($(seconds_since "$started") s since the start)"

# -- the suite --------------------------------------------------------------------

suite_started=$(now_us)
status=0
(cd "$tmp/package" \
  && CHARGEONCE_TEST_URL=http://127.0.0.1:$port \
    CHARGEONCE_TEST_GATEWAY_TOKEN=$(<"$tmp/gateway.token") \
    CHARGEONCE_TEST_WORKER_TOKEN=$(<"$tmp/worker.token") \
    CHARGEONCE_TEST_ADMIN_TOKEN=$(<"$tmp/admin.token") \
    phpunit --configuration phpunit.xml.dist --fail-on-skipped --fail-on-risky \
      --fail-on-warning --fail-on-incomplete --log-junit "$tmp/junit.xml") \
  || status=$?
((status == 0)) || die "phpunit exited $status (see above)"
# Both suites ran, none of them empty.
count() {
  sed -n "s/.*<testsuite name=\"$1\".* tests=\"\([0-9]*\)\" assertions=\"\([0-9]*\)\".*/\1 \2/p" \
    "$tmp/junit.xml" | head -n1
}
read -r unit_tests unit_assertions <<<"$(count unit)"
read -r integration_tests integration_assertions <<<"$(count integration)"
((${unit_tests:-0} > 0 && ${integration_tests:-0} > 0)) \
  || die "a suite did not run: unit '${unit_tests:-}', integration '${integration_tests:-}'"
echo "php: phpunit took $(seconds_since "$suite_started") s"
ok "unit: $unit_tests tests, $unit_assertions assertions;" \
  "integration: $integration_tests tests, $integration_assertions assertions"

stop_server "$server_pid"
echo "php: all passed in $(seconds_since "$started") s"
