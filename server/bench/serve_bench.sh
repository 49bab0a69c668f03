#!/usr/bin/env bash
# serve_bench.sh — server-side time of the standard request against the store's lookup floor,
# measured in one run on one snapshot:
#   1. tlsynth model: an LR model of KEYS keys (default 100M) in a temp dir;
#   2. tlserve --workers 1 serves it; tlpredict sends REQUESTS standard requests (200 items,
#      300 shared + 200 per-item ids, closed loop) with ids the model knows;
#   3. the server's own histogram (/metrics quantile gauges) gives p50/p99 of decode-to-encoded;
#   4. lookup_floor times store_lookup_batch of the same number of ids (40,300) on the same
#      snapshot; the ratio server/floor is how much decode, scoring and encoding add.
# Usage: server/bench/serve_bench.sh [BUILD_DIR]   (env: KEYS=100M REQUESTS=2000 TMPDIR)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
BUILD=${1:-build}
KEYS=${KEYS:-100M}
REQUESTS=${REQUESTS:-2000}
for exe in store/tlsnap model/tlsynth server/tlserve codec/tlpredict server/lookup_floor; do
  [ -x "$BUILD/$exe" ] || { echo "serve_bench: $BUILD/$exe is not built" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/serve_bench.XXXXXX")
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf -- "$WORK"
}
trap cleanup EXIT

PIN0= PIN1=
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then PIN0="taskset -c 0"; PIN1="taskset -c 1"; fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); ADMIN=$(free_port)
MODEL=$WORK/ctr_lr/1

echo "== model: $KEYS keys"
"$BUILD/model/tlsynth" model --keys "$KEYS" --out "$MODEL" --name ctr_lr --seed 42 | tail -n 1
NKEYS=$("$BUILD/store/tlsnap" info "$MODEL" --brief | awk '$1 == "entries" {print $2}')

echo "== tlserve --workers 1 on 127.0.0.1:$PORT"
# the worker and the floor run on CPU 1, the client on CPU 0, so they do not take turns
$PIN1 "$BUILD/server/tlserve" --model "$MODEL" --port "$PORT" --admin-port "$ADMIN" --workers 1 \
  >"$WORK/tlserve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 600); do
  python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$ADMIN/readyz', timeout=1)" \
    2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/tlserve.log" >&2; exit 1; }
  sleep 0.2
done

echo "== tlpredict: $REQUESTS standard requests, closed loop"
$PIN0 "$BUILD/codec/tlpredict" --port "$PORT" --model ctr_lr --requests "$REQUESTS" \
  --key-space "${NKEYS:-10000000}" --seed 42 --print 3

read -r P50 P99 < <(python3 - "$ADMIN" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
q = {}
for line in text.splitlines():
    if line.startswith("tlserve_request_latency_quantile_seconds{"):
        q[line.split('"')[1]] = float(line.rsplit(" ", 1)[1]) * 1e6
print("%.0f %.0f" % (q["0.5"], q["0.99"]))
PY
)
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=

echo "== lookup floor: 40,300 ids per batch through store_lookup_batch, same snapshot"
FLOOR_JSON=$($PIN1 "$BUILD/server/lookup_floor" --model "$MODEL" --keys 40300 --batches "$REQUESTS" \
  --key-space "${NKEYS:-10000000}" --seed 42 | tee /dev/stderr | tail -n 1)
read -r F50 F99 < <(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('%.0f %.0f' % (d['floor_p50_us'], d['floor_p99_us']))" "$FLOOR_JSON")

python3 - "$P50" "$P99" "$F50" "$F99" "$KEYS" <<'PY'
import sys
p50, p99, f50, f99 = map(float, sys.argv[1:5])
print()
print("| standard request, %s-key LR, 1 worker | p50 us | p99 us |" % sys.argv[5])
print("|---|---|---|")
print("| tlserve server-side (decode -> encoded) | %.0f | %.0f |" % (p50, p99))
print("| store lookup floor (40,300 ids, one batch) | %.0f | %.0f |" % (f50, f99))
print("| ratio | %.2f | %.2f |" % (p50 / f50, p99 / f99))
print('{"server_p50_us":%.0f,"server_p99_us":%.0f,"floor_p50_us":%.0f,"floor_p99_us":%.0f,'
      '"ratio_p50":%.3f,"ratio_p99":%.3f}' % (p50, p99, f50, f99, p50 / f50, p99 / f99))
PY
