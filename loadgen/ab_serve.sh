#!/usr/bin/env bash
# ab_serve.sh — two builds of tlserve served in turn, the same load on each: the honest way to
# show a serving change on a noisy 2-core machine (compare the pairs, not runs hours apart).
#
#   loadgen/ab_serve.sh BUILD_A BUILD_B [PAIRS]
#
# Each pair starts BUILD_A's tlserve, then BUILD_B's, on a KEYS-key LR model (tlsynth model,
# made once in WORK), `--workers 1 --lookup-threads 1`, and sends tlgen's standard request at
# RATE req/s for DURATION s (1 s warm-up) to each; with HOG=1 a nice-0 process spins beside
# them for the run (more runnable threads than cores). Prints one line per run: p50, p99,
# p99.9 in microseconds, errors, and tlserve_lookup_split_sleeps_total.
# Env: KEYS=10000000 RATE=300 DURATION=10 HOG=0 WORK=/tmp/ab_serve
set -euo pipefail
a=${1:?usage: ab_serve.sh BUILD_A BUILD_B [PAIRS]}
b=${2:?usage: ab_serve.sh BUILD_A BUILD_B [PAIRS]}
pairs=${3:-3}
KEYS=${KEYS:-10000000} RATE=${RATE:-300} DURATION=${DURATION:-10} HOG=${HOG:-0}
WORK=${WORK:-/tmp/ab_serve}
for bd in "$a" "$b"; do
  [ -x "$bd/server/tlserve" ] || { echo "ab_serve.sh: no $bd/server/tlserve" >&2; exit 2; }
done
mkdir -p "$WORK"
model="$WORK/lr_$KEYS"
[ -d "$model" ] || "$b/model/tlsynth" model --keys "$KEYS" --name ctr_lr --seed 42 \
  --out "$model" >/dev/null

run() { # build
  local port admin srv hog=""
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$1/server/tlserve" --model "$model" --port "$port" --admin-port "$admin" --workers 1 \
    --lookup-threads 1 --gate-sample 0 --guard-window-ms 0 >"$WORK/tlserve.log" 2>&1 &
  srv=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break
    kill -0 "$srv" 2>/dev/null || { echo "tlserve exited: $WORK/tlserve.log" >&2; exit 1; }
    sleep 0.1
  done
  if [ "$HOG" = 1 ]; then
    (end=$((SECONDS + DURATION + 3)); while [ $SECONDS -lt $end ]; do :; done) &
    hog=$!
  fi
  "$b/loadgen/tlgen" --port "$port" --model ctr_lr --rate "$RATE" --duration "$DURATION" \
    --warmup 1 --key-space "$KEYS" --json 2>/dev/null | tail -n 1 >"$WORK/tlgen.json"
  local sleeps
  sleeps=$(curl -s "http://127.0.0.1:$admin/metrics" |
    awk '$1 == "tlserve_lookup_split_sleeps_total" {print $2}')
  python3 - "$WORK/tlgen.json" "$1" "${sleeps:-n/a}" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read())
print("%-28s p50 %7d  p99 %7d  p99.9 %7d  errors %d  sleeps %s" % (
    sys.argv[2], d["p50_us"], d["p99_us"], d.get("p99.9_us", d.get("p999_us", 0)),
    d.get("errors", 0), sys.argv[3]))
PY
  if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; fi
  kill "$srv"
  wait "$srv" 2>/dev/null || true
}
for _ in $(seq "$pairs"); do
  run "$a"
  run "$b"
done
