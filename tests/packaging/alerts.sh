#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# packaging/prometheus/alerts.yml: valid rules (promtool check rules) that
# fire when their condition holds long enough and not otherwise (promtool
# test rules alerts.test.yml, every alert with a firing and a quiet case).
# Needs promtool (Debian's prometheus package, scripts/install-deps).
#
# usage: alerts.sh SOURCE_DIR
set -euo pipefail
src=$1
command -v promtool >/dev/null || {
  echo "alerts: promtool is required (apt-get install prometheus)" >&2
  exit 1
}
cd "$src/packaging/prometheus"
promtool check rules alerts.yml
promtool test rules alerts.test.yml
# Every alert of the file has a test case.
for alert in $(sed -n 's/^ *- alert: *//p' alerts.yml); do
  grep -q "alertname: $alert\$" alerts.test.yml ||
    { echo "alerts: $alert has no test in alerts.test.yml" >&2; exit 1; }
done
echo "alerts: OK"
