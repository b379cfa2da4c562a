#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the README's walkthrough against a fresh chargeonce-server that starts
# its own embedded Postgres cluster, started as the README says: by
# scripts/run (a copy in the temp dir, whose var/ it then uses, running
# SERVER instead of a build), which also serves HTTP with development tokens
# under var/http/.
#
# usage: walkthrough.sh README.md CHARGEONCE-SERVER CHARGEONCE-CLI
#
# A walkthrough is every ```sh fenced line between the README markers
# `<!-- walkthrough:begin -->` and `<!-- walkthrough:end -->`; a begin
# marker may name server options (`<!-- walkthrough:begin --opt=x -->`),
# which the README's text asks the reader to start the server with. The
# walkthroughs run in order, each against the server restarted with its
# options on the same cluster, its commands in one bash process (variables
# persist) in the directory of that var/, with 127.0.0.1:4242 replaced by the
# test server's port, 127.0.0.1:4280 by its HTTP port, build/main/chargeonce-cli
# by CHARGEONCE-CLI with lib.sh's --timeout and curl by curl with a
# --max-time as long (liveness bounds; the README's commands rely on the
# defaults). Each start must print the three tokens scripts/run keeps in
# var/http/ (mode 600), the same ones every time.
# Conventions checked for every command:
#   cmd ...  # exit N     the command must exit with N (default 0)
#   # => {json}           the line after a command: its stdout must be exactly
#                         one JSON object that jq's `contains` this subset
# The temp dir is made under $PWD (ctest: the build dir), not /tmp: when run
# as root the cluster runs as `postgres`, which must reach the directory.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 3)) || die "usage: walkthrough.sh README.md SERVER CLI"
readme=$1
server_bin=$(realpath "$2")
cli=$(realpath "$3")
run_script=$(dirname "${BASH_SOURCE[0]}")/../../scripts/run
[[ -r $readme ]] || die "cannot read $readme"
[[ -x $server_bin ]] || die "not an executable: $server_bin"
[[ -x $run_script ]] || die "not an executable: $run_script"
[[ -x $cli ]] || die "not an executable: $cli"
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
command -v curl >/dev/null || die "curl is required (apt-get install curl)"
[[ $cli != *[[:space:]]* ]] || die "the cli path must not contain spaces"

tmp=$(mktemp -d "$PWD/walkthrough.XXXXXX")
chmod 755 "$tmp"
on_exit_remove "$tmp"
# The server stops its cluster on SIGTERM; if it cannot, the trap does.
on_exit_stop_postgres "$tmp/pg/data"
# scripts/run works from the directory above its own: the temp dir.
mkdir "$tmp/scripts"
cp "$run_script" "$tmp/scripts/run"
export CHARGEONCE_SERVER_BIN=$server_bin
server_bin=$tmp/scripts/run # what lib.sh's start_server runs

# -- the walkthrough as a script ----------------------------------------------

# Prints "README-line<TAB>text" for every fenced sh line of walkthrough $2
# (1, 2, ...).
extract_block() {
  awk -v want="$2" '
    /<!-- walkthrough:begin( .*)? -->/ { n++; inside = (n == want); next }
    /<!-- walkthrough:end -->/ { inside = 0; next }
    inside && !fenced && /^```sh[[:space:]]*$/ { fenced = 1; next }
    inside && fenced && /^```[[:space:]]*$/ { fenced = 0; next }
    inside && fenced { print NR "\t" $0 }
  ' "$1"
}

# The server options the begin marker of walkthrough $2 names, if any.
block_options() {
  awk -v want="$2" '
    /<!-- walkthrough:begin( .*)? -->/ {
      if (++n == want) {
        sub(/^.*<!-- walkthrough:begin */, ""); sub(/ *-->.*$/, ""); print
      }
    }
  ' "$1"
}

blocks=$(grep -c -- '<!-- walkthrough:begin' "$readme" || true)

# Runtime helpers of the generated script (emitted with declare -f).
step_begin() {
  step_line=$1
  step_text=$2
  printf '\n$ %s\n' "$step_text"
}

# Also leaves the failure in $step_out.failed, for the message die repeats
# after the logs.
# shellcheck disable=SC2154 # step_out is set by the generated script
step_fail() {
  echo "walkthrough: FAILED at README line $step_line: $step_text" >&2
  echo "walkthrough: $1" >&2
  printf 'line %s: %s: %s\n' "$step_line" "$step_text" "$1" \
    >"$step_out.failed"
  exit 1
}

# step_out and step_err are set by the generated script.
# shellcheck disable=SC2154
step_end() {
  local rc=$1 want_rc=$2 want=$3
  cat "$step_out"
  # curl prints a body as it came, without a final newline.
  [[ ! -s $step_out || -z $(tail -c1 "$step_out") ]] || echo
  sed 's/^/(stderr) /' "$step_err"
  ((rc == want_rc)) || step_fail "exit status $rc, expected $want_rc"
  [[ -z $want ]] && return 0
  jq -e -s --argjson want "$want" \
    'length == 1 and (.[0] | type == "object" and contains($want))' \
    "$step_out" >/dev/null 2>&1 \
    || step_fail "stdout is not one JSON object containing $want"
}

# One pending command: text, README line, expected exit and JSON subset.
cmd_text="" cmd_line="" cmd_rc=0 cmd_want="" steps=0
cli_command="$cli --timeout=$cli_timeout"
curl_command="curl --max-time ${cli_timeout%s}"

emit_step() {
  [[ -n $cmd_text ]] || return 0
  local shown=${cmd_text//"$cli_command"/build/main/chargeonce-cli}
  shown=${shown//"$curl_command"/curl}
  ((cmd_rc == 0)) || shown+="  # exit $cmd_rc"
  printf 'step_begin %q %q\n' "$cmd_line" "$shown"
  # shellcheck disable=SC2016 # expanded by the generated script
  printf '{\n%s\n} >"$step_out" 2>"$step_err"\n' "$cmd_text"
  printf 'step_end $? %q %q\n' "$cmd_rc" "$cmd_want"
  steps=$((steps + 1))
  cmd_text=""
}

# Reads extract_block's output; writes the script that runs the steps.
generate() {
  local nr line rx_exit rx_want
  rx_exit='^(.*[^[:space:]])[[:space:]]+#[[:space:]]*exit[[:space:]]+([0-9]+)'
  rx_exit+='[[:space:]]*$'
  rx_want='^[[:space:]]*#[[:space:]]*=>[[:space:]]*(.*)$'
  echo 'set -u -o pipefail'
  declare -f step_begin step_fail step_end
  printf 'step_out=%q step_err=%q\n' "$tmp/step.out" "$tmp/step.err"
  while IFS=$'\t' read -r nr line; do
    line=${line//127.0.0.1:4242/127.0.0.1:$port}
    line=${line//127.0.0.1:4280/127.0.0.1:$http_port}
    line=${line//build\/main\/chargeonce-cli/"$cli_command"}
    # curl as a command (at the start, or after a space or a '(').
    line=$(sed -E "s/(^|[[:space:](])curl /\1$curl_command /g" <<<"$line")
    if [[ $line =~ $rx_want ]]; then
      [[ -n $cmd_text && -z $cmd_want ]] \
        || die "README line $nr: '# =>' without a command before it"
      cmd_want=${BASH_REMATCH[1]}
      jq -e 'type == "object"' <<<"$cmd_want" >/dev/null 2>&1 \
        || die "README line $nr: not a JSON object: $cmd_want"
    elif [[ $line =~ ^[[:space:]]*(#.*)?$ ]]; then
      continue
    else
      if [[ -n $cmd_text && $cmd_text == *\\ ]]; then
        cmd_text+=$'\n' # continuation of a multi-line command
      else
        emit_step
        cmd_line=$nr cmd_text="" cmd_rc=0 cmd_want=""
      fi
      if [[ $line =~ $rx_exit ]]; then
        line=${BASH_REMATCH[1]} cmd_rc=${BASH_REMATCH[2]}
      fi
      cmd_text+=$line
    fi
  done
  emit_step
  printf 'printf "\\nwalkthrough: all %%s steps passed\\n" %s\n' "$steps"
}

# -- the server ----------------------------------------------------------------

socket="$tmp/pg/socket/.s.PGSQL.5432"
((${#socket} <= 107)) || die "build dir too deep for a Unix socket: $socket"

# The development tokens scripts/run printed on this start: in var/http/,
# mode 600, the same as on its first start.
first_tokens=""
check_tokens() {
  local role file now=""
  for role in gateway worker admin; do
    file=$tmp/var/http/$role.token
    [[ -s $file ]] || die "scripts/run made no $file"
    [[ $(stat -c %a "$file") == 600 ]] || die "$file has mode $(stat -c %a "$file")"
    grep -qF -- "$(head -n1 "$file")" "$server_log" \
      || die "scripts/run did not print the $role token: $(head -n5 "$server_log")"
    now+=$(<"$file")
  done
  [[ -z $first_tokens || $now == "$first_tokens" ]] \
    || die "scripts/run made new tokens on a restart"
  first_tokens=$now
}

# -- the walkthroughs ----------------------------------------------------------

((blocks >= 1)) || die "no walkthrough markers in $readme"
for ((k = 1; k <= blocks; k++)); do
  read -ra options <<<"$(block_options "$readme" "$k")"
  start_server "$tmp/server" --port=0 --http-port=0 --data-dir="$tmp/pg" \
    ${options[@]+"${options[@]}"}
  port=$server_port
  http_port=$(port_of http)
  [[ -n $http_port ]] || die "scripts/run serves no HTTP: $(cat "$server_port_file")"
  check_tokens
  echo "walkthrough $k: server pid $server_pid listening on 127.0.0.1:$port," \
    "HTTP on 127.0.0.1:$http_port ${options[*]+${options[*]}}"
  block=$(extract_block "$readme" "$k")
  [[ -n $block ]] || die "no \`\`\`sh lines in walkthrough $k"
  [[ ($block == *127.0.0.1:4242* && $block == *build/main/chargeonce-cli*) ||
    ($block == *127.0.0.1:4280* && $block == *curl*) ]] \
    || die "walkthrough $k must use build/main/chargeonce-cli and 127.0.0.1:4242," \
      "or curl and 127.0.0.1:4280"
  steps=0
  generate <<<"$block" >"$tmp/steps.sh"
  (cd "$tmp" && bash steps.sh) \
    || die "walkthrough $k failed: $(cat "$tmp/step.out.failed" 2>/dev/null || echo "see above")"
  ((k == blocks)) || stop_server "$server_pid"
done

# -- shutdown ------------------------------------------------------------------

stop_server "$server_pid"
[[ ! -e $tmp/pg/data/postmaster.pid ]] \
  || die "postgres still runs (postmaster.pid of $tmp/pg remains)"
if pgrep -f -- "$tmp/pg" >/dev/null; then
  die "postgres processes of $tmp/pg remain: $(pgrep -f -- "$tmp/pg" | xargs)"
fi
echo "walkthrough: server stopped cleanly"
