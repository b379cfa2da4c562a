#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The HTTP/JSON adapter end to end, against a real chargeonce-server on its
# own database in the CHARGEONCE_TEST_DSN cluster: the OpenAPI document
# against the route table, every route and status code, token separation and
# bad input (each leaves the chat's rows unchanged), slow clients, event
# streams, /healthz /readyz /metrics, the examples, TLS and shutdown.
# usage: http.sh SERVER ROUTES_DUMP SOURCE_DIR   (needs curl, jq, python3,
# psql and CHARGEONCE_TEST_DSN; fails, never skips, without them)
set -euo pipefail
# shellcheck source=tests/support/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"

server_bin=$1
routes_dump=$2
src=$3

ok() { echo "http: ok: $*"; }

[[ -n ${CHARGEONCE_TEST_DSN:-} ]] || die "CHARGEONCE_TEST_DSN is not set (run scripts/test)"
for tool in curl jq python3 psql php; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

tmp=$(mktemp -d "$PWD/http.XXXXXX")
on_exit_remove "$tmp"
db=chargeonce_http_$$
dsn="$CHARGEONCE_TEST_DSN dbname=$db" # the last dbname wins
streams=()

drop_database() {
  psql "$CHARGEONCE_TEST_DSN" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
    >/dev/null 2>&1 || true
}
on_exit_run drop_database

# -- the server -----------------------------------------------------------------

# Its own database: the short lease and sweep interval below act on it alone.
psql "$CHARGEONCE_TEST_DSN" -qAtc "CREATE DATABASE $db" >/dev/null
token() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
gw=$(token gateway)
wk=$(token worker)
ad=$(token admin)
echo "$wk" >"$tmp/worker.token"

start_server "$tmp/server" --postgres="$dsn" --port=0 --http-port=0 \
  --http-gateway-token="$gw" --http-worker-token-file="$tmp/worker.token" \
  --http-admin-token="$ad" --queue-notice-delay=1s --lease-duration=2s \
  --sweep-interval=1s --http-max-body=4096 --http-timeout=6s \
  --http-threads=6 --http-max-streams=2 --text-cancel-after-start=request
port=$(port_of http)
[[ -n $port ]] || die "no http= line in the port file: $(cat "$server_port_file")"
base=http://127.0.0.1:$port

# The listen backlog is the system's, not httplib's built-in 5: a burst of
# new connections (the races below open 16 at once) waits in the accept
# queue instead of having SYNs dropped or being reset on a busy machine.
backlog=$(ss -Hltn "sport = :$port" | awk '{print $3; exit}')
somaxconn=$(</proc/sys/net/core/somaxconn)
((backlog >= 128 || backlog == somaxconn)) \
  || die "the HTTP port listens with a backlog of '$backlog'" \
    "(somaxconn $somaxconn), expected the system's limit"
ok "the HTTP port listens with a backlog of $backlog"

# Every answer the suite reads is recorded here, one JSON object a line, and
# checked against docs/openapi.yaml at the end (response_check.py).
responses=$tmp/responses.jsonl
: >"$responses"

# record METHOD PATH: appends the answer of the last request (status in
# $code, body in $tmp/out, headers in $tmp/headers) to $responses.
record() {
  local ctype
  ctype=$(sed -n 's/^content-type:[[:space:]]*//Ip' "$tmp/headers" | tr -d '\r' | tail -n1)
  jq -nc --arg method "$1" --arg path "$2" --argjson status "$code" \
    --arg ctype "$ctype" --rawfile body "$tmp/out" \
    '{$method, $path, $status, content_type: (if $ctype == "" then null else $ctype end),
      $body}' >>"$responses"
}

# req METHOD PATH TOKEN [BODY]: sets code (status) and out (body); headers in
# $tmp/headers.
req() {
  local args=(-s -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -X "$1")
  [[ -n $3 ]] && args+=(-H "Authorization: Bearer $3")
  (($# >= 4)) && args+=(-H 'Content-Type: application/json' --data-binary "$4")
  code=$(curl "${args[@]}" "$base$2") || die "curl $1 $2 failed"
  out=$(cat "$tmp/out")
  record "$1" "$2"
}

# check STATUS ERROR METHOD PATH TOKEN [BODY]: one request whose status must
# be STATUS and, unless ERROR is -, whose {"error"} must be ERROR.
check() {
  local want=$1 error=$2
  shift 2
  req "$@"
  [[ $code == "$want" ]] || die "$1 $2: status $code, expected $want: $out"
  if [[ $error != - ]]; then
    [[ $(jq -r .error <<<"$out") == "$error" ]] \
      || die "$1 $2: error $(jq -c . <<<"$out"), expected $error"
    [[ $(jq -r '.message | type' <<<"$out") == string ]] \
      || die "$1 $2: no message in $out"
  fi
}

field() { jq -r "$1" <<<"$out"; }

# readyz answers 503 when its own probes (Postgres, the actors) time out, as
# they may on a busy machine: waited for, not asked once.
readyz_is() { [[ $(curl -s -o /dev/null -w '%{http_code}' "$base/readyz") == "$1" ]]; }

# Everything Postgres holds about one chat: bad or refused requests must not
# change it.
snapshot() {
  psql "$dsn" -qAtc "SELECT (SELECT row_to_json(c) FROM chats c WHERE chat_id = $1),
    (SELECT json_agg(r) FROM reservations r WHERE chat_id = $1),
    (SELECT count(*) FROM ledger WHERE chat_id = $1)"
}

# -- the document ---------------------------------------------------------------

"$routes_dump" >"$tmp/routes"
python3 "$src/tests/http/openapi_check.py" "$src/docs/openapi.yaml" \
  "$tmp/routes" || die "docs/openapi.yaml does not match the routes"
ok "openapi.yaml documents exactly the $(wc -l <"$tmp/routes") routes"

# -- operations -----------------------------------------------------------------

check 200 - GET /healthz ""
[[ $(field .status) == ok ]] || die "healthz: $out"
poll 60 readyz_is 200 || die "readyz: $(curl -s "$base/readyz")"
check 200 - GET /metrics ""
grep -qi '^content-type: text/plain; version=0.0.4' "$tmp/headers" \
  || die "metrics content type: $(cat "$tmp/headers")"
ok "healthz, readyz and metrics need no token"

# -- admin ----------------------------------------------------------------------

chat=$(random_chat)
check 201 - POST /v1/chats "$ad" "{\"chat\":$chat,\"daily_images\":1,\"balance\":1}"
[[ $(field .chat) == "$chat" && $(field .balance) == 1 && $(field .plan) == free ]] \
  || die "create: $out"
check 409 already_exists POST /v1/chats "$ad" "{\"chat\":$chat}"
ok "create-chat: 201, then 409 already_exists"

# -- token separation -----------------------------------------------------------

before=$(snapshot "$chat")
other=$(random_chat)
check 403 forbidden POST /v1/chats "$gw" "{\"chat\":$other}"
check 403 forbidden POST /v1/chats "$wk" "{\"chat\":$other}"
check 403 forbidden POST "/v1/chats/$chat/top-ups" "$wk" '{"credits":5,"payment_id":"x1"}'
check 403 forbidden PUT "/v1/chats/$chat/premium" "$gw" '{"until":"2099-01-01"}'
check 403 forbidden PATCH "/v1/chats/$chat/flags" "$gw" '{"banned":true}'
check 403 forbidden POST "/v1/chats/$chat/reservations" "$ad" '{"kind":"image"}'
check 403 forbidden POST "/v1/chats/$chat/reservations" "$wk" '{"kind":"image"}'
check 403 forbidden POST "/v1/chats/$chat/reservations/1/commit" "$gw"
check 403 forbidden POST "/v1/chats/$chat/reservations/1/start" "$ad"
check 403 forbidden GET /v1/events "$wk"
check 403 forbidden GET "/v1/chats/$chat" "$ad"
check 401 unauthorized POST "/v1/chats/$chat/top-ups" "" '{"credits":5,"payment_id":"x2"}'
grep -qi '^www-authenticate: Bearer' "$tmp/headers" || die "401 without WWW-Authenticate"
check 401 unauthorized POST "/v1/chats/$chat/top-ups" "${ad}x" '{"credits":5,"payment_id":"x3"}'
check 401 unauthorized POST "/v1/chats/$chat/touch" "wrong-token-wrong-token"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Basic $ad" \
  -X POST "$base/v1/chats/$chat/top-ups" --data '{"credits":5,"payment_id":"x4"}')
[[ $code == 401 ]] || die "Basic auth: $code"
[[ $(snapshot "$chat") == "$before" ]] || die "refused requests changed chat $chat"
[[ $(psql "$dsn" -qAtc "SELECT count(*) FROM chats WHERE chat_id = $other") == 0 ]] \
  || die "a refused create-chat created $other"
ok "a token of one role cannot call another role's routes (401/403, nothing changed)"

# -- bad input ------------------------------------------------------------------

R=/v1/chats/$chat/reservations
check 400 malformed_json POST "$R" "$gw" '{"kind":'
check 400 malformed_json POST "$R" "$gw" ''
check 422 invalid_argument POST "$R" "$gw" '[1]'
check 422 invalid_argument POST "$R" "$gw" '{}'
check 422 invalid_argument POST "$R" "$gw" '{"kind":"video"}'
check 422 invalid_argument POST "$R" "$gw" '{"kind":1}'
check 422 invalid_argument POST "$R" "$gw" '{"kind":"image","request_id":5}'
check 422 invalid_argument POST "$R" "$gw" '{"kind":"image","requestId":"a"}'
check 422 invalid_argument POST "$R" "$gw" "{\"kind\":\"image\",\"request_id\":\"$(printf 'r%.0s' {1..300})\"}"
check 422 invalid_argument POST /v1/chats/abc/reservations "$gw" '{"kind":"image"}'
check 422 invalid_argument POST /v1/chats/0/touch "$gw"
check 422 invalid_argument POST /v1/chats/99999999999999999999/touch "$gw"
check 422 invalid_argument POST "$R/x/start" "$wk"
check 422 invalid_argument POST "$R/0/start" "$wk"
T=/v1/chats/$chat/top-ups
check 422 invalid_argument POST "$T" "$ad" '{"credits":"5","payment_id":"b1"}'
check 422 invalid_argument POST "$T" "$ad" '{"credits":1.5,"payment_id":"b2"}'
check 422 invalid_argument POST "$T" "$ad" '{"credits":0,"payment_id":"b3"}'
check 422 invalid_argument POST "$T" "$ad" '{"credits":99999999999999999999,"payment_id":"b4"}'
check 422 invalid_argument POST "$T" "$ad" '{"credits":5}'
check 422 invalid_argument POST "$T" "$ad" '{"credits":5,"payment_id":""}'
# A grant's terms, on a chat of their own (the balance of $chat is checked
# below): each out of range or contradictory one is refused.
g=$(random_chat) G=/v1/chats/$g/top-ups
check 201 - POST /v1/chats "$ad" "{\"chat\":$g}"
check 422 invalid_argument POST "$G" "$ad" '{"credits":5,"payment_id":"g1","expires_in_ms":0}'
check 422 invalid_argument POST "$G" "$ad" '{"credits":5,"payment_id":"g1","priority":1001}'
check 422 invalid_argument POST "$G" "$ad" '{"credits":5,"payment_id":"g1","source":"gift"}'
check 422 invalid_argument POST "$G" "$ad" '{"credits":5,"payment_id":"g1","expiresIn":5}'
check 422 invalid_argument POST "$G" "$ad" \
  '{"credits":5,"payment_id":"g1","expires_in_ms":1000,"expires_at":"2999-01-01T00:00:00Z"}'
check 422 invalid_argument POST "$G" "$ad" \
  '{"credits":5,"payment_id":"g1","expires_at":"2001-01-01T00:00:00Z"}'
# A promo grant that expires in 30 days, spent before the default priority.
check 200 - POST "$G" "$ad" \
  '{"credits":2,"payment_id":"g-promo","expires_in_ms":2592000000,"priority":10,"source":"promo"}'
[[ $(field '[.source, .priority, .expires_in_ms, (.grant_id | type), (.expires_at | type)] | @csv') \
  == '"promo",10,2592000000,"number","string"' ]] || die "the promo top-up answered $out"
promo_grant=$(field .grant_id)
check 200 - POST "$G" "$ad" \
  '{"credits":2,"payment_id":"g-promo","expires_in_ms":2592000000,"priority":10,"source":"promo"}'
[[ $(field .grant_id) == "$promo_grant" ]] || die "a retried top-up made another grant: $out"
check 422 invalid_argument POST "$G" "$ad" \
  '{"credits":2,"payment_id":"g-promo","expires_in_ms":2592000000,"priority":11,"source":"promo"}'
check 200 - POST "$G" "$ad" '{"credits":1,"payment_id":"g-plain"}'
[[ $(field '[.source, .priority, .expires_at, .expires_in_ms] | @csv') == '"purchase",100,,' ]] \
  || die "a top-up without terms answered $out"
ok "top-ups with a grant's terms, retried, and refused"
# status lists both grants in spending order: the promo grant (priority
# 10) before the plain one.
check 200 - GET "/v1/chats/$g" "$gw"
[[ $(field '[.grants[0].id, .grants[0].source, .grants[0].priority, .grants[0].left, .grants[0].expired, .grants[1].payment_id, .grants[1].priority, (.grants | length), .balance] | @csv') \
  == "$promo_grant,\"promo\",10,2,false,\"g-plain\",100,2,3" ]] || die "status listed the grants as $out"
ok "status lists the grants in spending order"
# Voids, by id and by payment id; a second void answers the same grant.
check 200 - POST "/v1/chats/$g/grants/$promo_grant/void" "$ad"
[[ $(field '[.id, .source, .left, .held, (.voided_at | type)] | @csv') \
  == "$promo_grant,\"promo\",0,0,\"string\"" ]] || die "void by id answered $out"
voided_at=$(field .voided_at)
check 200 - POST "/v1/chats/$g/grants/$promo_grant/void" "$ad" '{}'
[[ $(field .voided_at) == "$voided_at" ]] || die "a second void changed the grant: $out"
check 200 - POST "/v1/chats/$g/grants/void" "$ad" '{"payment_id":"g-plain"}'
[[ $(field .payment_id) == g-plain && $(field .left) == 0 ]] || die "void by payment id: $out"
check 200 - GET "/v1/chats/$g" "$gw"
[[ $(field .balance) == 0 && $(field '.grants | length') == 0 ]] \
  || die "the voided grants left a balance or a listed grant: $out"
check 404 not_found POST "/v1/chats/$g/grants/999999999999/void" "$ad"
check 404 not_found POST "/v1/chats/$g/grants/void" "$ad" '{"payment_id":"g-none"}'
check 422 invalid_argument POST "/v1/chats/$g/grants/void" "$ad" '{}'
check 422 invalid_argument POST "/v1/chats/$g/grants/abc/void" "$ad"
check 422 invalid_argument POST "/v1/chats/$g/grants/0/void" "$ad"
check 403 forbidden POST "/v1/chats/$g/grants/$promo_grant/void" "$gw"
ok "grants voided by id and by payment id, again, and refused"
check 422 invalid_argument POST /v1/chats "$ad" '{"chat":"1"}'
check 422 invalid_argument POST /v1/chats "$ad" "{\"chat\":$other,\"balance\":-1}"
check 422 invalid_argument POST /v1/chats "$ad" "{\"chat\":$other,\"daily_images\":2147483648}"
check 422 invalid_argument PUT "/v1/chats/$chat/premium" "$ad" '{"until":"tomorrow"}'
check 422 invalid_argument PUT "/v1/chats/$chat/premium" "$ad" '{}'
check 422 invalid_argument PATCH "/v1/chats/$chat/flags" "$ad" '{"blocked":"yes"}'
big=$(printf 'x%.0s' {1..5000})
check 413 payload_too_large POST "$T" "$ad" "{\"credits\":5,\"payment_id\":\"$big\"}"
code=$(curl -s -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -H "Authorization: Bearer $ad" \
  -H 'Transfer-Encoding: chunked' --data-binary "{\"credits\":5,\"payment_id\":\"$big\"}" "$base$T")
record POST "$T"
[[ $code == 413 ]] || die "a chunked huge body: $code $(cat "$tmp/out")"
check 404 no_route GET /v1/nope ""
check 404 no_route GET / "$gw"
check 404 no_route POST "/v1/chats/$chat/touch/" "$gw"
check 405 method_not_allowed GET "/v1/chats/$chat/touch" "$gw"
grep -qi '^allow: POST' "$tmp/headers" || die "405 without Allow: POST"
check 405 method_not_allowed DELETE /v1/chats "$ad"
[[ $(printf 'BREW / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' \
  | timeout 60 python3 -c 'import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(sys.stdin.buffer.read())
print(s.recv(100).split()[1].decode())' "$port") == 400 ]] || die "unknown method: not 400"

# Slow clients: headers that never end and a body that never comes get a
# 400, and a connection that says nothing is closed, all after
# --http-timeout (6 s, above the default 5 s: a drop after at least 5.5 s
# is this flag's, and a slow machine only makes it later), while other
# clients are served meanwhile (before the first drop: a request that takes
# milliseconds). Waits for a drop or an answer up to `patience`, a
# liveness bound.
python3 - "$port" "$ad" "$chat" <<'EOF' || die "slow clients"
import socket, sys, threading, time, urllib.request
port, token, chat = int(sys.argv[1]), sys.argv[2], sys.argv[3]
http_timeout, patience = 6, 60
failures, dropped_at = [], []
stalling = threading.Semaphore(0)  # one release per client that stalls
def stall(data, name):
    try:
        stall_once(data, name)
    except BaseException as e:  # SystemExit and AssertionError alike
        failures.append(f"{name}: {e}")
        stalling.release()  # never leave the main thread waiting
def stall_once(data, name):
    t0 = time.monotonic()  # before the server can start its timer
    s = socket.create_connection(("127.0.0.1", port), timeout=patience)
    s.sendall(data.encode())
    stalling.release()
    try:
        answer = s.recv(4096)  # the first byte of an answer, or the close
    except socket.timeout:
        sys.exit(f"{name}: no answer and still open after {patience} s")
    dropped_at.append(time.monotonic())
    took = time.monotonic() - t0
    status = answer.split(b" ")[1].decode() if answer else "closed"
    assert not status.startswith("2"), f"{name}: answered {status}"
    assert took >= http_timeout - 0.5, \
        f"{name}: dropped after {took:.1f} s, before --http-timeout ({http_timeout} s)"
    print(f"http: slow client '{name}' dropped after {took:.1f} s ({status})")
body = '{"credits":7,"payment_id":"slow"}'
cases = [
    (f"POST /v1/chats/{chat}/top-ups HTTP/1.1\r\nHost: x\r\nAuthor", "headers never end"),
    (f"POST /v1/chats/{chat}/top-ups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
     f"Content-Length: {len(body)}\r\n\r\n{body[:10]}", "body never comes"),
    ("", "silent connection"),
]
threads = [threading.Thread(target=stall, args=c) for c in cases]
for t in threads: t.start()
for t in threads:
    assert stalling.acquire(timeout=patience), "a slow client did not connect"
t0 = time.monotonic()
with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=patience) as r:
    assert r.status == 200
served_at = time.monotonic()
for t in threads: t.join()
if not failures and served_at > min(dropped_at):
    failures.append("healthz was answered only after a slow client was dropped")
print(f"http: healthz answered in {served_at - t0:.3f} s while three clients stalled")
sys.exit("; ".join(failures) if failures else 0)
EOF
[[ $(snapshot "$chat") == "$before" ]] || die "bad input changed chat $chat"
ok "bad input: 400/404/405/413/422, slow clients dropped, nothing changed"

# -- gateway and worker ---------------------------------------------------------

W=/v1/chats/$chat/reservations
fresh=$(random_chat)
check 200 - POST "/v1/chats/$fresh/touch" "$gw"
[[ $(field .plan) == free && $(field .started) == false ]] || die "touch: $out"
check 404 not_found GET "/v1/chats/$(random_chat)" "$gw"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field .daily_images) == 1 && $(field .reservation) == null ]] || die "status: $out"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"job-1"}'
id=$(field .id)
[[ $(field .status) == queued && $(field .held.daily_images) == 1 ]] || die "reserve: $out"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"job-1"}'
[[ $(field .id) == "$id" ]] || die "a retried reserve made a new reservation: $out"
check 409 busy POST "$W" "$gw" '{"kind":"image","request_id":"job-2"}'
check 409 invalid_state POST "$W/$id/commit" "$wk"
check 200 - POST "$W/$id/start" "$wk"
[[ $(field .status) == in_progress ]] || die "start: $out"
check 409 too_late DELETE "/v1/chats/$chat/reservation" "$gw"
check 200 - POST "$W/$id/heartbeat" "$wk"
[[ $(field .lease_expires_at) != null ]] || die "heartbeat: $out"
check 200 - POST "$W/$id/commit" "$wk"
receipt=$out
[[ $(field .charged.daily_images) == 1 && $(field .reservation) == "$id" ]] || die "commit: $out"
check 200 - POST "$W/$id/commit" "$wk"
[[ $out == "$receipt" ]] || die "a repeated commit differs: $out vs $receipt"
check 402 insufficient_messages POST "$W" "$gw" '{"kind":"text"}'
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"job-3"}'
[[ $(field .held.balance) == 1 ]] || die "reserve from balance: $out"
check 200 - DELETE "/v1/chats/$chat/reservation" "$gw"
[[ $(field .request_id) == job-3 ]] || die "cancel: $out"
check 404 not_found DELETE "/v1/chats/$chat/reservation" "$gw"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"job-4"}'
id=$(field .id)
check 200 - POST "$W/$id/start" "$wk"
check 200 - POST "$W/$id/fail" "$wk"
check 404 not_found POST "$W/$id/commit" "$wk"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field .balance) == 1 && $(field .daily_images) == 0 ]] || die "after fail: $out"
ok "touch, status, reserve (idempotent), start, heartbeat, commit (idempotent), cancel, fail"

# A job the queue delivered twice: the worker that names itself first runs
# it; the other delivery's worker hears already_started and changes nothing.
d=$(random_chat)
D=/v1/chats/$d/reservations
check 201 - POST /v1/chats "$ad" "{\"chat\":$d,\"balance\":1}"
check 200 - POST "$D" "$gw" '{"kind":"image","request_id":"job-1"}'
id=$(field .id)
check 200 - POST "$D/$id/start" "$wk" '{"worker":"queue-17-attempt-1"}'
check 409 already_started POST "$D/$id/start" "$wk" '{"worker":"queue-17-attempt-2"}'
[[ $out != *attempt-1* ]] || die "already_started names the other worker: $out"
check 409 already_started POST "$D/$id/heartbeat" "$wk" '{"worker":"queue-17-attempt-2"}'
check 409 already_started POST "$D/$id/commit" "$wk" '{"worker":"queue-17-attempt-2"}'
check 409 already_started POST "$D/$id/fail" "$wk" '{"worker":"queue-17-attempt-2"}'
check 200 - POST "$D/$id/start" "$wk" '{"worker":"queue-17-attempt-1"}'
check 200 - POST "$D/$id/commit" "$wk" '{"worker":"queue-17-attempt-1"}'
[[ $(field .charged.balance) == 1 ]] || die "commit by the worker that started it: $out"
check 422 invalid_argument POST "$D/$id/start" "$wk" '{"worker":42}'
ok "a job delivered twice: the second worker is already_started (409) on start, heartbeat, commit and fail"

# Units: a hold split over daily images and credits; a commit of fewer units
# charges the daily pocket first and releases the rest.
u=$(random_chat)
U=/v1/chats/$u/reservations
check 201 - POST /v1/chats "$ad" "{\"chat\":$u,\"daily_images\":2,\"balance\":10}"
check 422 invalid_argument POST "$U" "$gw" '{"kind":"image","units":0}'
check 422 invalid_argument POST "$U" "$gw" '{"kind":"image","units":1000001}'
check 402 insufficient_images POST "$U" "$gw" '{"kind":"image","units":13}'
check 200 - POST "$U" "$gw" '{"kind":"image","units":5}'
id=$(field .id)
[[ $(field .units) == 5 && $(field .held.daily_images) == 2 && $(field .held.balance) == 3 ]] \
  || die "reserve of 5 units: $out"
check 200 - POST "$U/$id/start" "$wk"
check 422 invalid_argument POST "$U/$id/commit" "$wk" '{"units":6}'
check 422 invalid_argument POST "$U/$id/commit" "$wk" '{"units":"3"}'
check 200 - POST "$U/$id/commit" "$wk" '{"units":3}'
receipt=$out
[[ $(field .units) == 3 && $(field .charged.daily_images) == 2 && $(field .charged.balance) == 1 \
  && $(field .released.balance) == 2 ]] || die "commit of 3 units: $out"
check 200 - POST "$U/$id/commit" "$wk" '{"units":5}'
[[ $out == "$receipt" ]] || die "a retried commit with other units differs: $out vs $receipt"
check 200 - GET "/v1/chats/$u" "$gw"
[[ $(field .balance) == 9 && $(field .daily_images) == 0 ]] || die "after the commit of 3 units: $out"
ok "units: 5 held as 2 daily images + 3 credits; 3 committed, 2 released; 0, 13 and 6 refused"

# Parallel jobs: a chat with two slots (request ids required), status with
# every job and the holds, cancels that name their job, limits.
par=$(random_chat)
P=/v1/chats/$par/reservations
check 201 - POST /v1/chats "$ad" "{\"chat\":$par,\"balance\":5,\"max_active_jobs\":2}"
[[ $(field .max_active_jobs) == 2 && $(field '.reservations | length') == 0 ]] \
  || die "create with a limit: $out"
check 422 invalid_argument POST "$P" "$gw" '{"kind":"image"}'
check 200 - POST "$P" "$gw" '{"kind":"image","request_id":"p1"}'
p1=$(field .id)
check 200 - POST "$P" "$gw" '{"kind":"image","request_id":"p2"}'
p2=$(field .id)
[[ $(field .slot) == 1 ]] || die "second job's slot: $out"
check 409 busy POST "$P" "$gw" '{"kind":"image","request_id":"p3"}'
[[ $(field .message) == "chat $par has 2 of 2 jobs active" ]] || die "busy: $out"
check 200 - GET "/v1/chats/$par" "$gw"
[[ $(field '[.reservations[].id] | join(",")') == "$p1,$p2" \
  && $(field .reservation.id) == "$p1" && $(field .held.balance) == 2 \
  && $(field .available.balance) == 3 && $(field .balance) == 5 ]] \
  || die "status of two jobs: $out"
check 422 invalid_argument DELETE "/v1/chats/$par/reservation" "$gw"
check 200 - DELETE "$P/$p2" "$gw"
[[ $(field .id) == "$p2" ]] || die "cancel by id: $out"
check 200 - DELETE "/v1/chats/$par/reservation?request_id=p1" "$gw"
[[ $(field .id) == "$p1" ]] || die "cancel by request id: $out"
check 200 - POST "$P" "$gw" '{"kind":"image","request_id":"p1"}'
[[ $(field .id) == "$p1" && $(field .status) == cancelled && $(field .ended_at) != null ]] \
  || die "a retried reserve of a cancelled job: $out"
check 422 invalid_argument POST "$P" "$gw" '{"kind":"text","request_id":"p1"}'
check 403 forbidden PUT "/v1/chats/$par/limits" "$gw" '{"max_active_jobs":3}'
check 422 invalid_argument PUT "/v1/chats/$par/limits" "$ad" '{"max_active_jobs":65}'
check 422 invalid_argument PUT "/v1/chats/$par/limits" "$ad" '{}'
check 404 not_found PUT "/v1/chats/$(random_chat)/limits" "$ad" '{"max_active_jobs":3}'
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"max_active_jobs":null}'
[[ $(field .max_active_jobs) == 1 ]] || die "limit back to the plan's: $out"
# The balance-low threshold: alone (the job limit stays), null or "default"
# back to the server's (0 here); a negative one refused.
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"max_active_jobs":2}'
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":4}'
[[ $(field .balance_low_threshold) == 4 && $(field .max_active_jobs) == 2 ]] \
  || die "threshold alone: $out"
check 422 invalid_argument PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":-1}'
check 422 invalid_argument PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":"low"}'
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":"default"}'
[[ $(field .balance_low_threshold) == 0 ]] || die "threshold back to the server's: $out"
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":4,"max_active_jobs":null}'
check 200 - PUT "/v1/chats/$par/limits" "$ad" '{"balance_low_threshold":null}'
[[ $(field .balance_low_threshold) == 0 && $(field .max_active_jobs) == 1 ]] \
  || die "threshold null: $out"
ok "two jobs at once: status, busy with the count, cancel by id and request id, limits"

# Races over HTTP, more at once than --http-threads: one chat, 16 reserves
# with different request_ids (exactly one wins, the rest are busy), then 16
# commits of the winner (one charge, 16 identical receipts).
race=$(random_chat)
check 201 - POST /v1/chats "$ad" "{\"chat\":$race,\"balance\":5}"
python3 - "$base" "$gw" "$wk" "$race" "$responses" <<'EOF' || die "races over HTTP"
import json, sys, threading, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
base, gw, wk, chat, responses = sys.argv[1:]
recording = threading.Lock()
def post(path, token, body=None):
    req = urllib.request.Request(base + path, method="POST", data=json.dumps(body or {}).encode(),
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:  # a liveness bound
            status, ctype, raw = r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        status, ctype, raw = e.code, e.headers["Content-Type"], e.read()
    with recording, open(responses, "a") as f:  # for response_check.py
        print(json.dumps({"method": "POST", "path": path, "status": status,
                          "content_type": ctype, "body": raw.decode()}), file=f)
    return status, json.loads(raw)
with ThreadPoolExecutor(16) as pool:
    got = list(pool.map(lambda i: post(f"/v1/chats/{chat}/reservations", gw,
                                       {"kind": "image", "request_id": f"race-{i}"}), range(16)))
wins = [b for s, b in got if s == 200]
assert len(wins) == 1, got
assert all(s == 409 and b["error"] == "busy" for s, b in got if s != 200), got
rid = wins[0]["id"]
assert post(f"/v1/chats/{chat}/reservations/{rid}/start", wk)[0] == 200
with ThreadPoolExecutor(16) as pool:
    got = list(pool.map(lambda i: post(f"/v1/chats/{chat}/reservations/{rid}/commit", wk), range(16)))
assert all(s == 200 for s, _ in got), got
assert len({json.dumps(b, sort_keys=True) for _, b in got}) == 1, got
EOF
[[ $(psql "$dsn" -qAtc "SELECT count(*) || ' ' || (SELECT chargeonce_amount(pockets, 'balance') FROM chats WHERE chat_id = $race)
  FROM ledger WHERE entry = 'charge' AND chat_id = $race") == "1 4" ]] || die "the races charged other than once"
ok "16 racing reserves: one wins; 16 racing commits: one charge, one receipt"

# HTTP requests pass through the same facades as CAF clients: they count.
# (Into a file first: grep -q would end the pipe early, failing curl.)
curl -s "$base/metrics" >"$tmp/metrics"
grep -Eq '^chargeonce_operations_total\{operation="commit",outcome="ok"\} [1-9]' \
  "$tmp/metrics" || die "commits over HTTP are not in /metrics"
# The scrape as Prometheus' own Python client parses it (counters lose
# their _total there): the standard process metrics and the build info.
# Debian's interpreter, which has Debian's python3-prometheus-client.
/usr/bin/python3 - "$tmp/metrics" <<'PY' || die "the Prometheus client cannot read /metrics"
import sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
want = ["process_cpu_seconds", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
        "process_start_time_seconds", "chargeonce_build_info",
        "chargeonce_operations", "chargeonce_releases"]
missing = [w for w in want if w not in families]
assert not missing, missing
info = families["chargeonce_build_info"].samples[0]
assert info.labels["version"] and info.value == 1, info
assert families["process_open_fds"].samples[0].value >= 3
PY
# Every metric the Grafana dashboard queries is one this server exports.
/usr/bin/python3 - "$tmp/metrics" "$src/packaging/grafana/chargeonce.json" <<'PY' \
  || die "the dashboard queries metrics the server does not export"
import json, re, sys
exported = set(re.findall(r"^# TYPE (\S+) ", open(sys.argv[1]).read(), re.M))
dash = json.load(open(sys.argv[2]))
assert dash["panels"], "no panels"
used = set()
for panel in dash["panels"]:
    assert panel["title"] and panel["targets"], panel
    for target in panel["targets"]:
        for name in re.findall(r"\b((?:chargeonce|process)_[a-z_]+)", target["expr"]):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name)
                     if name not in exported else name)
unknown = sorted(used - exported)
assert not unknown, unknown
print("dashboard: %d panels query %d metrics, all exported" % (len(dash["panels"]), len(used)))
PY
ok "operations over HTTP appear in /metrics; the Prometheus client parses it; the dashboard's metrics exist"

check 200 - POST "$T" "$ad" '{"credits":5,"payment_id":"pay-1"}'
first=$out
check 200 - POST "$T" "$ad" '{"credits":5,"payment_id":"pay-1"}'
[[ $out == "$first" ]] || die "a retried top-up differs: $out"
check 422 invalid_argument POST "$T" "$ad" '{"credits":6,"payment_id":"pay-1"}'
check 404 not_found POST "/v1/chats/$(random_chat)/top-ups" "$ad" '{"credits":1,"payment_id":"p"}'
check 200 - PUT "/v1/chats/$chat/premium" "$ad" '{"until":"2099-01-01T00:00:00Z"}'
[[ $(field .plan) == premium ]] || die "premium: $out"
check 200 - PUT "/v1/chats/$chat/premium" "$ad" '{"until":"2001-01-01"}'
check 404 not_found PUT "/v1/chats/$(random_chat)/premium" "$ad" '{"until":"2001-01-01"}'
check 200 - PATCH "/v1/chats/$chat/flags" "$ad" '{"blocked":true}'
[[ $(field .blocked) == true && $(field .balance) == 6 ]] || die "flags: $out"
check 403 chat_blocked POST "$W" "$gw" '{"kind":"image"}'
check 200 - PATCH "/v1/chats/$chat/flags" "$ad" '{"blocked":false,"banned":true}'
check 403 chat_banned POST "$W" "$gw" '{"kind":"image"}'
check 200 - PATCH "/v1/chats/$chat/flags" "$ad" '{"banned":false}'
check 404 not_found PATCH "/v1/chats/$(random_chat)/flags" "$ad" '{"banned":false}'
ok "top-up (idempotent), premium, flags; blocked/banned reserve -> 403"

# -- events and fencing ---------------------------------------------------------

stream() { # stream FILE: a background SSE client; its pid in `streams`
  curl -s -N -H "Authorization: Bearer $gw" "$base/v1/events" >"$1" &
  streams+=($!)
  on_exit_kill "$!"
}

# has_event FILE TYPE RESERVATION: the stream in FILE carried that event for
# $chat, as an `event:` line followed by its `data:` line.
has_event() {
  grep -A1 -x "event: $2" "$1" | sed -n 's/^data: //p' \
    | jq -e -s --arg type "$2" --argjson chat "$chat" --argjson id "$3" \
      'any(.[]; .event == $type and .chat == $chat and .reservation == $id)' \
      >/dev/null
}
# Each poll below waits up to 60 s: a liveness bound, over 10x the timer it
# waits for (queue-notice-delay 1 s, lease 2 s + sweep-interval 1 s) and
# what the server adds to it.
stream "$tmp/events"
poll 60 grep -q '^: subscribed' "$tmp/events" || die "no event stream"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"job-5"}'
id=$(field .id)
poll 60 has_event "$tmp/events" queue_notice "$id" \
  || die "no queue_notice for $id: $(cat "$tmp/events")"
echo "http: queue_notice after $poll_seconds s (queue-notice-delay 1 s)"
check 200 - POST "$W/$id/start" "$wk"
check 200 - POST "$W/$id/heartbeat" "$wk" # arms the 2 s lease, then silence
poll 60 has_event "$tmp/events" reservation_released "$id" \
  || die "no reservation_released for $id: $(grep -v '^:' "$tmp/events")"
echo "http: reservation_released $poll_seconds s after the heartbeat (lease 2 s)"
check 410 expired POST "$W/$id/commit" "$wk"
check 410 expired POST "$W/$id/heartbeat" "$wk"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field .balance) == 6 && $(field .reservation) == null ]] || die "after release: $out"
ok "SSE: queue_notice and reservation_released; a released job's commit -> 410"

# has_json FILE TYPE FILTER: the stream in FILE carried event TYPE for $chat
# whose JSON passes the jq FILTER.
has_json() {
  grep -A1 -x "event: $2" "$1" | sed -n 's/^data: //p' \
    | jq -e -s --arg type "$2" --argjson chat "$chat" \
      "any(.[]; .event == \$type and .chat == \$chat and ($3))" >/dev/null
}
# A grant that expires inside expiry-notice (24 h) is told at once, by its
# top-up; a reserve that takes the available balance (6 + 1) below the
# chat's own threshold (7) is balance_low, with the reservation.
check 200 - PUT "/v1/chats/$chat/limits" "$ad" '{"balance_low_threshold":7}'
check 200 - POST "/v1/chats/$chat/top-ups" "$ad" \
  "{\"credits\":1,\"payment_id\":\"sse-$chat\",\"expires_in_ms\":3600000}"
grant=$(field .grant_id)
expires=$(field .expires_at)
poll 60 has_json "$tmp/events" credits_expiring \
  ".grant == $grant and .credits == 1 and .expires_at == \"$expires\" and .event_id > 0" \
  || die "no credits_expiring for grant $grant: $(grep -v '^:' "$tmp/events")"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"low-1"}'
id=$(field .id)
poll 60 has_json "$tmp/events" balance_low \
  ".available == 6 and .threshold == 7 and .cause == \"reserve\" and .reservation == $id" \
  || die "no balance_low for $id: $(grep -v '^:' "$tmp/events")"
check 200 - DELETE "$W/$id" "$gw"
check 200 - PUT "/v1/chats/$chat/limits" "$ad" '{"balance_low_threshold":null}'
check 200 - POST "/v1/chats/$chat/grants/$grant/void" "$ad" # the balance of 6 again
ok "SSE: credits_expiring from the top-up and balance_low, with their fields"

# Text runs with --text-cancel-after-start=request (image keeps refuse).
saved_chat=$chat saved_W=$W
chat=$(random_chat) W=/v1/chats/$chat/reservations
check 201 - POST /v1/chats "$ad" "{\"chat\":$chat,\"daily_messages\":2}"
check 200 - POST "$W" "$gw" '{"kind":"text","request_id":"talk-1"}'
id=$(field .id)
[[ $(field .cancel_requested) == false ]] || die "reserve: $out"
check 200 - POST "$W/$id/start" "$wk"
check 200 - DELETE "/v1/chats/$chat/reservation" "$gw"
[[ $(field .id) == "$id" && $(field .status) == in_progress &&
  $(field .cancel_requested) == true ]] || die "cancel after start: $out"
check 200 - DELETE "$W/$id" "$gw"
[[ $(field .cancel_requested) == true ]] || die "a repeated cancel: $out"
poll 60 has_event "$tmp/events" cancel_requested "$id" \
  || die "no cancel_requested for $id: $(grep -v '^:' "$tmp/events")"
# Durable events carry their id, as SSE `id:` and as event_id; a stream
# opened with Last-Event-ID replays what came after it.
eid=$(sed -n 's/^data: //p' "$tmp/events" | jq -s --argjson id "$id" \
  'map(select(.event == "cancel_requested" and .reservation == $id))[0].event_id')
[[ $eid =~ ^[0-9]+$ ]] || die "cancel_requested without an event_id: $(grep -v '^:' "$tmp/events")"
grep -qx "id: $eid" "$tmp/events" || die "no 'id: $eid' line: $(grep -v '^:' "$tmp/events")"
# Read until the event came, then closed.
curl -s -N -H "Authorization: Bearer $gw" -H "Last-Event-ID: $((eid - 1))" \
  "$base/v1/events" >"$tmp/replay" &
replay_pid=$!
on_exit_kill "$replay_pid"
poll 60 has_event "$tmp/replay" cancel_requested "$id" \
  || die "Last-Event-ID $((eid - 1)) replayed: $(cat "$tmp/replay")"
stop_process "$replay_pid"
# Events come in id order: had it been replayed, it would precede $eid.
! grep -q "^id: $((eid - 1))$" "$tmp/replay" || die "the replay repeated the last-seen event"
# http-max-streams is 2 here: the next waits until the server saw this one go.
last_streams_count() { grep -o 'stream [a-z]* .*streams=[0-9]*' "$tmp/server.log" | tail -n1; }
one_stream_left() { [[ $(last_streams_count) == *streams=1 ]]; }
poll 60 one_stream_left || die "the replay's stream was not closed"
# Nothing may come after=$eid; a replay would come within the 2 s this
# stream is read (a wait for something not to happen: a slow machine can
# only make it pass).
curl -s -N --max-time 2 -H "Authorization: Bearer $gw" "$base/v1/events?after=$eid" >"$tmp/replay" || true
poll 60 one_stream_left || die "the second replay's stream was not closed"
! has_event "$tmp/replay" cancel_requested "$id" || die "after=$eid replayed it: $(cat "$tmp/replay")"
code=$(curl -s -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -H "Authorization: Bearer $gw" \
  -H "Last-Event-ID: soon" "$base/v1/events")
record GET /v1/events
[[ $code == 422 && $(jq -r .error "$tmp/out") == invalid_argument ]] \
  || die "Last-Event-ID: soon answered $code $(cat "$tmp/out")"
check 422 invalid_argument GET "/v1/events?after=999999999999999" "$gw"
check 200 - POST "$W/$id/heartbeat" "$wk"
[[ $(field .cancel_requested) == true ]] || die "heartbeat: $out"
check 200 - POST "$W/$id/fail" "$wk"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field .daily_messages) == 2 && $(field .reservation) == null ]] \
  || die "after the worker aborted: $out"
ok "cancel after start (request): 200 cancel_requested, the event (with its id; replayed after Last-Event-ID), heartbeats carry it; fail charges nothing"

# Outcome unknown: the slot is freed, the hold kept; resolve decides once.
chat=$(random_chat) W=/v1/chats/$chat/reservations
check 201 - POST /v1/chats "$ad" "{\"chat\":$chat,\"balance\":2}"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"u-1"}'
id=$(field .id)
check 409 invalid_state POST "$W/$id/uncertain" "$wk" '{"provider_ref":"prov-u-1"}'
check 200 - POST "$W/$id/start" "$wk"
check 422 invalid_argument POST "$W/$id/uncertain" "$wk" '{}'
check 422 invalid_argument POST "$W/$id/uncertain" "$wk" '{"provider_ref":""}'
check 403 forbidden POST "$W/$id/uncertain" "$gw" '{"provider_ref":"prov-u-1"}'
check 200 - POST "$W/$id/uncertain" "$wk" '{"provider_ref":"prov-u-1"}'
[[ $(field .status) == outcome_unknown && $(field .slot) == -1 &&
  $(field .provider_ref) == prov-u-1 && $(field .uncertain_at) != null ]] \
  || die "uncertain: $out"
check 422 invalid_argument POST "$W/$id/uncertain" "$wk" '{"provider_ref":"other"}'
poll 60 has_event "$tmp/events" reconcile_needed "$id" \
  || die "no reconcile_needed for $id: $(grep -v '^:' "$tmp/events")"
check 200 - POST "$W" "$gw" '{"kind":"image","request_id":"u-2"}'
[[ $(field .held.balance) == 1 ]] || die "the freed slot: $out"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field '.available.balance') == 0 ]] || die "the uncertain hold is not counted: $out"
check 200 - GET "/v1/reservations?status=outcome_unknown&limit=1000" "$wk"
jq -e --argjson id "$id" 'any(.reservations[]; .id == $id and .provider_ref == "prov-u-1")' \
  <<<"$out" >/dev/null || die "not listed: $out"
check 422 invalid_argument GET "/v1/reservations?status=queued" "$wk"
check 422 invalid_argument GET "/v1/reservations?status=outcome_unknown&limit=0" "$wk"
check 422 invalid_argument GET "/v1/reservations?status=outcome_unknown&after=x" "$wk"
check 403 forbidden GET "/v1/reservations?status=outcome_unknown" "$gw"
check 409 invalid_state POST "$W/$id/commit" "$wk"
check 422 invalid_argument POST "$W/$id/resolve" "$wk" '{"outcome":"maybe"}'
check 422 invalid_argument POST "$W/$id/resolve" "$wk" '{"outcome":"failed","units":1}'
check 422 invalid_argument POST "$W/$id/resolve" "$wk" '{"outcome":"succeeded","units":2}'
check 200 - POST "$W/$id/resolve" "$wk" '{"outcome":"succeeded"}'
resolution=$out
[[ $(field .outcome) == succeeded && $(field .charged.balance) == 1 ]] \
  || die "resolve: $out"
check 200 - POST "$W/$id/resolve" "$wk" '{"outcome":"succeeded"}'
[[ $out == "$resolution" ]] || die "a repeated resolve differs: $out"
check 409 invalid_state POST "$W/$id/resolve" "$wk" '{"outcome":"failed"}'
# The support view (admin) of that chat: its timeline, newest first, in
# keyset pages, and explain.
H=/v1/chats/$chat
check 200 - GET "$H/history" "$ad"
[[ $(jq -c '[.entries[] | .cause + "/" + (.status // "") + "/" + .detail]' <<<"$out") == \
  '["commit//","reservation/committed/succeeded","reservation/queued/","admin//create_chat"]' &&
  $(field '.entries[0].change.balance') == -1 && $(field '.entries[0].after.balance') == 1 &&
  $(field '.entries[0].reservation') == "$id" && $(field '.entries[0].request_id') == u-1 &&
  $(field .next_before) == null ]] || die "history: $out"
check 200 - GET "$H/history?limit=1" "$ad"
[[ $(field '.entries | length') == 1 && $(field .next_before) != null ]] || die "history page 1: $out"
check 200 - GET "$H/history?limit=1&before=$(field .next_before)" "$ad"
[[ $(jq -c '[.entries[].cause]' <<<"$out") == '["reservation","reservation","admin"]' &&
  $(field .next_before) == null ]] || die "history page 2: $out"
check 422 invalid_argument GET "$H/history?limit=0" "$ad"
check 422 invalid_argument GET "$H/history?limit=1001" "$ad"
check 422 invalid_argument GET "$H/history?before=-1" "$ad"
check 422 invalid_argument GET "$H/history?before=1" "$ad"
check 403 forbidden GET "$H/history" "$gw"
check 404 not_found GET "/v1/chats/$(random_chat)/history" "$ad"
check 200 - GET "$H/explain" "$ad"
[[ $(field .chat) == "$chat" && $(field .plan) == free && $(field .plan_reason) == "never premium" &&
  $(field '.deadlines | length') == 1 && $(field '.history | length') == 4 &&
  $(field '.status.balance') == 1 && $(field .refill_interval_ms) == 86400000 ]] || die "explain: $out"
check 403 forbidden GET "$H/explain" "$wk"
check 404 not_found GET "/v1/chats/$(random_chat)/explain" "$ad"
ok "history (keyset pages of the ledger and the reservations) and explain, admin only"

chat=$saved_chat W=$saved_W
ok "uncertain (slot freed, hold kept, reconcile_needed), the reconcilers' list, resolve once"

stream "$tmp/events2"
poll 60 grep -q '^: subscribed' "$tmp/events2" || die "no second stream"
check 503 too_many_streams GET /v1/events "$gw"
grep -qi '^retry-after: 1' "$tmp/headers" || die "503 without Retry-After"
kill "${streams[@]}"
streams=()
closed_streams() { (($(grep -c 'http events stream closed' "$tmp/server.log") >= $1)); }
poll 60 closed_streams 2 || die "streams of gone clients were not closed"
poll 60 grep -q 'subscriber dropped subscribers=0' "$tmp/server.log" \
  || die "the event bus kept the gone subscribers"
stream "$tmp/events3"
# Refused (503), curl would end at once: that fails now, not after 60 s.
subscribed_again() {
  grep -q '^: subscribed' "$tmp/events3" && return 0
  alive "${streams[0]}" || die "no stream after the others closed: $(cat "$tmp/events3")"
  return 1
}
poll 60 subscribed_again || die "no stream after the others closed"
kill "${streams[@]}"
streams=()
no_stream_left() { [[ $(last_streams_count) == *streams=0 ]]; }
poll 60 no_stream_left || die "the third stream was not closed"
ok "at most --http-max-streams streams (503 beyond); gone clients unsubscribed"

# -- the examples ---------------------------------------------------------------

# Each example runs under a liveness bound above its own waits (up to 30 s
# for an event); a run takes a second or two (the notice comes after 1 s).
example_seconds=120
examples_started=$(now_us)
job_chat=$(random_chat)
check 201 - POST /v1/chats "$ad" "{\"chat\":$job_chat,\"daily_images\":1,\"balance\":1}"
export CHARGEONCE_URL=$base
CHARGEONCE_TOKEN=$gw timeout "$example_seconds" python3 \
  "$src/examples/gateway.py" "$job_chat" image upd-1 >"$tmp/gateway.out" \
  || die "gateway.py: $(cat "$tmp/gateway.out")"
grep -q '"step": "notice"' "$tmp/gateway.out" || die "gateway.py saw no notice"
id=$(jq -s -r '.[] | select(.step == "reserve") | .reservation' "$tmp/gateway.out")
echo "$job_chat $id" | CHARGEONCE_TOKEN=$wk timeout "$example_seconds" python3 \
  "$src/examples/worker.py" >"$tmp/worker.out" || die "worker.py failed"
[[ $(jq -r .committed "$tmp/worker.out") == true ]] || die "worker.py: $(cat "$tmp/worker.out")"
CHARGEONCE_TOKEN=$gw timeout "$example_seconds" python3 \
  "$src/examples/gateway.py" "$job_chat" image upd-2 >"$tmp/gateway.out" \
  || die "gateway.py (2): $(cat "$tmp/gateway.out")"
id=$(jq -s -r '.[] | select(.step == "reserve") | .reservation' "$tmp/gateway.out")
echo "$job_chat $id fail" | CHARGEONCE_TOKEN=$wk timeout "$example_seconds" python3 \
  "$src/examples/worker.py" >"$tmp/worker.out" || die "worker.py (fail) failed"
[[ $(jq -r .failed "$tmp/worker.out") == true ]] || die "worker.py: $(cat "$tmp/worker.out")"
check 200 - GET "/v1/chats/$job_chat" "$gw"
[[ $(field .daily_images) == 0 && $(field .balance) == 1 ]] || die "after the examples: $out"
ok "examples/gateway.py and examples/worker.py (commit and fail)"

# The same with the PHP examples (php-cli, php-curl); a redelivered update
# of the same message and button names the same job.
php_chat=$(random_chat)
check 201 - POST /v1/chats "$ad" "{\"chat\":$php_chat,\"daily_images\":1,\"balance\":1}"
php_gateway() {
  CHARGEONCE_TOKEN=$gw timeout "$example_seconds" php \
    "$src/examples/php/gateway.php" "$php_chat" image "$1" upscale \
    >"$tmp/gateway-php.out" || die "gateway.php: $(cat "$tmp/gateway-php.out")"
  grep -q '"step":"notice"' "$tmp/gateway-php.out" || die "gateway.php saw no notice"
  jq -s -r '.[] | select(.step == "reserve") | .reservation' "$tmp/gateway-php.out"
}
php_worker() {
  echo "$php_chat $1 $2" | CHARGEONCE_TOKEN=$wk timeout "$example_seconds" php \
    "$src/examples/php/worker.php" >"$tmp/worker-php.out" || die "worker.php failed"
}
id=$(php_gateway 18)
[[ $(jq -s -r '.[] | select(.step == "reserve") | .request_id' "$tmp/gateway-php.out") == msg-18-upscale ]] \
  || die "gateway.php's request id: $(cat "$tmp/gateway-php.out")"
php_worker "$id" ""
[[ $(jq -r .committed "$tmp/worker-php.out") == true ]] || die "worker.php: $(cat "$tmp/worker-php.out")"
id=$(php_gateway 19)
php_worker "$id" fail
[[ $(jq -r .failed "$tmp/worker-php.out") == true ]] || die "worker.php: $(cat "$tmp/worker-php.out")"
check 200 - GET "/v1/chats/$php_chat" "$gw"
[[ $(field .daily_images) == 0 && $(field .balance) == 1 ]] || die "after the PHP examples: $out"
echo "http: the 8 example runs took $(seconds_since "$examples_started") s"
ok "examples/php/gateway.php and worker.php (commit and fail)"

# -- readiness --------------------------------------------------------------------

last=$(psql "$dsn" -qAtc "SELECT max(name) FROM schema_migrations")
# Renamed, not deleted: the row keeps its checksum for when it comes back.
psql "$dsn" -qAtc "UPDATE schema_migrations SET name = 'hidden_$last' WHERE name = '$last'" >/dev/null
readyz_names_it() {
  curl -s "$base/readyz" | jq -e ".error == \"not_ready\" and (.message | contains(\"$last\"))" \
    >/dev/null
}
poll 60 readyz_is 503 || die "readyz with a migration missing"
poll 60 readyz_names_it || die "readyz body: $(curl -s "$base/readyz")"
psql "$dsn" -qAtc "UPDATE schema_migrations SET name = '$last' WHERE name = 'hidden_$last'" >/dev/null
poll 60 readyz_is 200 || die "readyz after the migration is back"
# Postgres gone for this server: new connections refused, its sessions
# killed. Operations answer 503 storage_unavailable with Retry-After.
psql "$CHARGEONCE_TEST_DSN" -qAtc "ALTER DATABASE $db ALLOW_CONNECTIONS false;
  SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
  WHERE datname = '$db'" >/dev/null
poll 60 readyz_is 503 || die "readyz while Postgres refuses connections"
check 503 storage_unavailable POST "/v1/chats/$chat/top-ups" "$ad" \
  '{"credits":1,"payment_id":"while-down"}'
grep -qi '^retry-after: 1' "$tmp/headers" || die "503 without Retry-After"
psql "$CHARGEONCE_TEST_DSN" -qAtc "ALTER DATABASE $db ALLOW_CONNECTIONS true" >/dev/null
poll 60 readyz_is 200 || die "readyz after Postgres is back"
touch_ok() { req POST "/v1/chats/$chat/touch" "$gw" && [[ $code == 200 ]]; }
poll 60 touch_ok || die "operations did not recover: $code $out"
echo "http: operations recovered $poll_seconds s after readyz"
check 200 - GET "/v1/chats/$chat" "$gw"
[[ $(field .balance) == 6 ]] || die "the refused top-up changed the balance: $out"
# Each connection found Postgres again (probing on its own), and the spell
# without a primary is counted.
metric() { curl -s "$base/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
no_outage_left() { [[ $(metric chargeonce_storage_unavailable) == 0 ]]; }
poll 60 no_outage_left || die "connections still without a primary: $(metric chargeonce_storage_unavailable)"
(($(metric chargeonce_persistence_reconnects_total) >= 1)) || die "no reconnect counted"
awk -v s="$(metric chargeonce_storage_unavailable_seconds_total)" 'BEGIN { exit !(s > 0) }' \
  || die "no time without a primary counted"
ok "readyz 503 without a migration or Postgres; storage_unavailable -> 503 + Retry-After; reconnects and time without a primary counted"

# -- shutdown with an open stream -------------------------------------------------

stream "$tmp/events4"
poll 60 grep -q '^: subscribed' "$tmp/events4" || die "no stream before shutdown"
stop_at=$(now_us)
stop_server "$server_pid"
echo "http: stopped $(seconds_since "$stop_at") s after SIGTERM"
grep -q 'http stopped' "$server_log" || die "no 'http stopped' in the log"
ok "SIGTERM with an open event stream: clean exit"

# -- startup checks and TLS -------------------------------------------------------

rc=0
"$server_bin" --postgres="$dsn" --http-port=0 --http-bind=0.0.0.0 2>"$tmp/refused.log" || rc=$?
[[ $rc == 2 ]] || die "plain HTTP beyond loopback was not refused: $rc"
grep -q 'refusing plain HTTP' "$tmp/refused.log" || die "$(cat "$tmp/refused.log")"
rc=0
"$server_bin" --postgres="$dsn" --http-port=0 --http-admin-token=short 2>"$tmp/refused.log" || rc=$?
[[ $rc == 2 ]] || die "a short token was accepted"
rc=0
"$server_bin" --postgres="$dsn" --http-port=0 --http-admin-token="$gw" \
  --http-gateway-token="$gw" 2>"$tmp/refused.log" || rc=$?
[[ $rc == 2 ]] || die "one token for two roles was accepted"
"$src/scripts/dev-certs" "$tmp/certs" >/dev/null
c=$tmp/certs
start_server "$tmp/tls" --postgres="$dsn" --port=0 --http-port=0 \
  --tls-cert="$c/server.pem" --tls-key="$c/server.key" --tls-ca="$c/ca.pem" \
  --http-gateway-token="$gw"
port=$(port_of http)
# The certificate chains to the cluster CA (s_client checks no host name:
# dev-certs' certificates carry only a CN, which curl does not match).
verify() {
  local said
  said=$(openssl s_client -connect "127.0.0.1:$port" -CAfile "$1" \
    -verify_return_error </dev/null 2>&1 || true)
  [[ $said == *"Verify return code: 0 (ok)"* ]]
}
verify "$c/ca.pem" || die "the HTTPS certificate does not chain to the cluster CA"
verify "$c/rogue-ca.pem" && die "the HTTPS certificate chains to another CA"
code=$(curl -s -k -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -H "Authorization: Bearer $gw" \
  -X POST "https://127.0.0.1:$port/v1/chats/$chat/touch" || true)
record POST "/v1/chats/$chat/touch"
[[ $code == 200 && $(jq -r .chat "$tmp/out") == "$chat" ]] || die "HTTPS touch: $code"
# No answer within 5 s counts as not answered: a slow machine can only make
# this pass.
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/healthz" || true)
[[ $code != 200 ]] || die "plain HTTP answered on the TLS port"
code=$(curl -s -k -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -H "Authorization: Bearer $gw" \
  -X POST "https://127.0.0.1:$port/v1/chats" --data "{\"chat\":$other}" || true)
record POST /v1/chats
[[ $code == 403 && $(jq -r .error "$tmp/out") == forbidden ]] \
  || die "admin route without an admin token configured: $code"
ok "TLS with the role ports' certificate; startup refuses unsafe HTTP options"

# -- every answer against the document --------------------------------------------

python3 "$src/tests/http/response_check.py" "$src/docs/openapi.yaml" "$responses" \
  || die "answers that docs/openapi.yaml does not describe (above)"
ok "every answer recorded ($(wc -l <"$responses")) is one docs/openapi.yaml describes"

echo "http: all passed"
