#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/configuration.md against the server and packaging/chargeonce.conf:
#   - every option of `--help` has a row in the doc and a line in the conf;
#   - every row of the doc is an option of `--help` (a name with a dot, e.g.
#     scheduler.policy, is CAF's: it must be in `--long-help` and in the
#     conf's section of that name);
#   - every option the conf names is one of `--help` (or a documented CAF
#     one);
#   - where `--help` ends an option's line with its default in parentheses
#     (one word such as `(60s)` or `(127.0.0.1)`), the doc's default column
#     names the same value.
# A doc row is a markdown table row starting with | `option-name` |.
#
# usage: configuration.sh SERVER_BINARY REPO_ROOT
# Starts nothing and needs no database: it only runs --help and --long-help.
# Exit 0 when all agree, 1 naming every discrepancy, 2 on a usage error.
set -euo pipefail

usage() {
  echo "usage: configuration.sh SERVER_BINARY REPO_ROOT" >&2
  exit 2
}

(($# == 2)) || usage
server=$1
root=$2
doc=$root/docs/configuration.md
conf=$root/packaging/chargeonce.conf
[[ -x $server ]] || {
  echo "configuration: not an executable: $server" >&2
  exit 2
}
for f in "$doc" "$conf"; do
  [[ -r $f ]] || {
    echo "configuration: cannot read $f" >&2
    exit 2
  }
done

problems=0
problem() {
  echo "configuration: $*" >&2
  problems=$((problems + 1))
}

# -- what the server says ------------------------------------------------------

# CAF prints the help text on stderr. Lines look like
#   (-p|--port) <uint16>      : all roles on 127.0.0.1, ... (4242)
#   --bind=<string>           : address of the gateway and worker ports (127.0.0.1)
#   --allow-plain-tcp         : allow unencrypted ports ...
# (the parsing of tests/packaging/install.sh); CAF's own switches are not
# server options.
help=$("$server" --help 2>&1) || {
  echo "configuration: $server --help failed: $help" >&2
  exit 1
}
help_lines=$(sed -nE '/^ +(\(-[a-z?]\|)?--[a-z0-9-]+/p' <<<"$help" \
  | grep -vE -- '--(help|long-help|dump-config|config-file)[ =)]')
options=$(sed -nE 's/^ +(\(-[a-z?]\|)?--([a-z0-9-]+).*/\2/p' <<<"$help_lines")
if (($(wc -l <<<"$options") < 30)); then
  echo "configuration: could not read --help: $help" >&2
  exit 1
fi
long_help=$("$server" --long-help 2>&1) || {
  echo "configuration: $server --long-help failed" >&2
  exit 1
}
caf_options=$(sed -nE 's/^ +--([a-z0-9-]+\.[a-z0-9.-]+)=.*/\1/p' <<<"$long_help")

is_option() { grep -qxF -- "$1" <<<"$options"; }
is_caf_option() { grep -qxF -- "$1" <<<"$caf_options"; }

# The default --help shows for `name`: a single word in parentheses ending
# the line of an option that takes a value; empty otherwise.
help_default() {
  local line
  line=$(grep -E -- "--$1([ =)]|\$)" <<<"$help_lines" | head -n1)
  [[ $line =~ (=<|\)\ <) ]] || return 0
  sed -nE 's/.*\(([-0-9A-Za-z./]+)\)[[:space:]]*$/\1/p' <<<"$line"
}

# -- what the doc says ---------------------------------------------------------

# shellcheck disable=SC2016 # the backticks are markdown, not expansions
doc_rows=$(grep -E '^\| `[a-z0-9.-]+` \|' "$doc" || true)
# shellcheck disable=SC2016
documented=$(sed -nE 's/^\| `([a-z0-9.-]+)` \|.*/\1/p' <<<"$doc_rows")
is_documented() { grep -qxF -- "$1" <<<"$documented"; }

# The default column of `name`'s row, backticks removed.
doc_default() {
  grep -F -- "| \`$1\` |" <<<"$doc_rows" | head -n1 \
    | awk -F'|' '{ print $3 }' | tr -d '`'
}

while read -r name; do
  [[ -n $name ]] && problem "docs/configuration.md lists '$name' twice"
done < <(sort <<<"$documented" | uniq -d)

# -- what the example config says ----------------------------------------------

# `section.key` for keys outside [global], `key` inside; commented or not.
configured=$(awk '
  /^;?\[[a-z]+\][[:space:]]*$/ {
    section = $0; gsub(/[;\[\][:space:]]/, "", section); next
  }
  match($0, /^;?[a-z][a-z0-9-]*=/) {
    key = substr($0, 1, RLENGTH - 1); sub(/^;/, "", key)
    print (section == "" || section == "global") ? key : section "." key
  }
' "$conf")
is_configured() { grep -qxF -- "$1" <<<"$configured"; }

# -- the checks ----------------------------------------------------------------

for name in $options; do
  is_documented "$name" \
    || problem "--help has '$name', docs/configuration.md does not"
  is_configured "$name" \
    || problem "--help has '$name', packaging/chargeonce.conf does not"
done

for name in $documented; do
  if [[ $name == *.* ]]; then
    is_caf_option "$name" \
      || problem "docs/configuration.md has '$name', --long-help does not"
    is_configured "$name" \
      || problem "docs/configuration.md has '$name', packaging/chargeonce.conf does not"
  else
    is_option "$name" \
      || problem "docs/configuration.md has '$name', --help does not"
  fi
done

for name in $configured; do
  if [[ $name == *.* ]]; then
    is_documented "$name" \
      || problem "packaging/chargeonce.conf has '$name', docs/configuration.md does not"
  else
    is_option "$name" \
      || problem "packaging/chargeonce.conf has '$name', --help does not"
  fi
done

for name in $options; do
  want=$(help_default "$name")
  if [[ -z $want ]] || ! is_documented "$name"; then
    continue
  fi
  have=$(doc_default "$name")
  grep -qwF -- "$want" <<<"$have" \
    || problem "default of '$name': --help says '$want', docs/configuration.md says '$(xargs <<<"$have")'"
done

if ((problems > 0)); then
  echo "configuration: FAILED: $problems discrepancies" >&2
  exit 1
fi
echo "configuration: OK ($(wc -w <<<"$options") options of --help," \
  "$(wc -w <<<"$documented") rows in docs/configuration.md)"
