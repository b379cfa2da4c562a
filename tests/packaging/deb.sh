#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cpack -G DEB`: builds chargeonce_<version>_<arch>.deb from the build
# directory and checks it: it holds exactly what `cmake --install` installs,
# it depends on the Debian runtime libraries (each installed here, so the
# package installs), dpkg installs it into a scratch root and removes it
# again, and the installed server, started with the installed config,
# answers the installed CLI.
#
# usage: deb.sh CMAKE CPACK BUILD_DIR
# Needs dpkg, dpkg-shlibdeps (dpkg-dev), jq and CHARGEONCE_TEST_DSN. dpkg's
# --root install needs root (as CI runs); without it the package is only
# unpacked there (dpkg-deb -x), which the message says.
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

(($# == 3)) || die "usage: deb.sh CMAKE CPACK BUILD_DIR"
cmake=$1 cpack=$2
build=$(realpath "$3")
[[ -n ${CHARGEONCE_TEST_DSN:-} ]] \
  || die "CHARGEONCE_TEST_DSN is not set (scripts/test sets it)"

tmp=$(mktemp -d "$PWD/deb.XXXXXX")
on_exit_remove "$tmp"
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
version=$(cache CMAKE_PROJECT_VERSION)
prefix=$(cache CMAKE_INSTALL_PREFIX)
deb=$tmp/pkg/chargeonce_${version}_$(dpkg --print-architecture).deb

# -- the package ----------------------------------------------------------------

(cd "$build" && "$cpack" -G DEB -B "$tmp/pkg") >"$tmp/cpack.log" 2>&1 \
  || die "cpack: $(cat "$tmp/cpack.log")"
[[ -f $deb ]] || die "no $(basename "$deb"): $(ls "$tmp/pkg")"
[[ $(dpkg-deb -f "$deb" Package) == chargeonce && $(dpkg-deb -f "$deb" Version) == "$version" ]] \
  || die "package fields: $(dpkg-deb -f "$deb")"

# What cmake --install installs, file for file.
"$cmake" --install "$build" --prefix "$tmp/ref$prefix" >"$tmp/install.log" \
  || die "cmake --install: $(cat "$tmp/install.log")"
(cd "$tmp/ref" && find . -type f | sed 's|^\./||' | sort) >"$tmp/want"
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./||' | sort >"$tmp/got"
diff -u "$tmp/want" "$tmp/got" >"$tmp/diff" \
  || die "the package differs from cmake --install: $(cat "$tmp/diff")"

# The runtime libraries, each a package this machine has.
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libcaf-core0.17 libcaf-io0.17 libpqxx-6.4 libcpp-httplib0.11; do
  [[ $depends == *"$lib "* || $depends == *"$lib," || $depends == *"$lib" ]] \
    || die "Depends lacks $lib: $depends"
done
# (A virtual name such as libspdlog1.10-fmt9 counts when an installed
# package provides it.)
provided=$(dpkg-query -W -f='${Provides}\n' | tr ',' '\n' | sed 's/(.*//; s/ //g')
for pkg in $(tr ',' '\n' <<<"$depends" | sed 's/(.*//; s/|.*//; s/ //g'); do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || grep -qx "$pkg" <<<"$provided" \
    || die "dependency $pkg is not installed here"
done

# -- installed into a scratch root ----------------------------------------------

root=$tmp/root
if ((EUID == 0)); then
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
  touch "$root/var/lib/dpkg/status"
  # The dependencies are this machine's, not the scratch root's.
  dpkg --root="$root" --force-depends --force-script-chrootless -i "$deb" \
    >"$tmp/dpkg.log" 2>&1 || die "dpkg -i: $(cat "$tmp/dpkg.log")"
  [[ $(dpkg --root="$root" -s chargeonce | sed -n 's/^Status: //p') == "install ok installed" ]] \
    || die "not installed: $(dpkg --root="$root" -s chargeonce)"
else
  echo "deb: not root: unpacking with dpkg-deb -x instead of dpkg -i"
  dpkg-deb -x "$deb" "$root"
fi

server_bin=$root$prefix/bin/chargeonce-server server_dir=$tmp
conf=$(find "$root" -name chargeonce.conf -path '*/chargeonce/*' | head -n1)
[[ -f $conf ]] || die "no installed chargeonce.conf"
start_server "$tmp/installed" --config-file="$conf" \
  --postgres="$CHARGEONCE_TEST_DSN" --port=0
cli=("$root$prefix/bin/chargeonce-cli" --server="127.0.0.1:$server_port"
  --timeout="$cli_timeout")
chat=$(random_chat)
"${cli[@]}" create-chat --chat="$chat" --balance=3 >"$tmp/create" \
  || die "create-chat: $(cat "$tmp/create")"
[[ $("${cli[@]}" status --chat="$chat" | jq .balance) == 3 ]] \
  || die "status did not show the created chat"
kill -TERM "$server_pid"
wait_gone "$server_pid" 30 || die "server did not stop on SIGTERM"

if ((EUID == 0)); then
  dpkg --root="$root" --force-depends --force-script-chrootless -r chargeonce \
    >"$tmp/remove.log" 2>&1 || die "dpkg -r: $(cat "$tmp/remove.log")"
  [[ ! -e $root$prefix/bin/chargeonce-server ]] || die "dpkg -r left the server"
fi
echo "deb: OK ($(basename "$deb"), $(stat -c %s "$deb") bytes)"
