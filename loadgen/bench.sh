#!/usr/bin/env bash
# bench.sh — the benchmark suite's peer comparison: tlserve against the service a team would
# build on Redis, under the same open-loop load, on one model, in one run:
#   1. tlsnap gen: an LR model of KEYS keys in a temp dir;
#   2. lookup_floor on that snapshot: the store's batched lookup of one standard request's ids
#      (40,300) on one thread — the lowest possible lookup time for one request;
#   3. tlserve --workers 2 serves the snapshot;
#   4. redis-server (loopback, free port, no persistence) gets the same weights through
#      redis_load (one binary key per id, MSET batches); redis_adapter serves our wire format
#      from it (pipelined MGETs per request, tlserve's scoring);
#   5. for each offered rate, tlgen sends the standard request (200 items, 300 shared +
#      200 per-item ids) to tlserve, then the same to the adapter;
#   6. results/<date>/summary.md: the table, plus every tlgen JSON and log in the same folder.
# Everything started here is stopped on exit, on failure and on Ctrl-C.
#
# Usage: loadgen/bench.sh
# Env:   KEYS=100M  RATES="50,100,200,400"  DURATION=10 (s per rate and server)  WARMUP=2
#        QUICK=1    tiny run: KEYS=200K RATES=20,50 DURATION=3 (explicit env still wins)
#        BUILD=build-release  ADAPTER_THREADS=2  CONNECTIONS=4  TIMEOUT_MS=10000 (tlgen)
#        RESULTS=results/<date>
#        KEEP_WORK=1 keeps the temp dir (model, logs) and prints its path
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
ROOT=$PWD

if [ "${QUICK:-0}" = 1 ]; then
  KEYS=${KEYS:-200K}; RATES=${RATES:-20,50}; DURATION=${DURATION:-3}
fi
KEYS=${KEYS:-100M}
RATES=${RATES:-50,100,200,400}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
BUILD=${BUILD:-build-release}
ADAPTER_THREADS=${ADAPTER_THREADS:-2}
CONNECTIONS=${CONNECTIONS:-4}
TIMEOUT_MS=${TIMEOUT_MS:-10000}
STAMP=$(date +%Y-%m-%d_%H%M%S)
OUT=${RESULTS:-results/$STAMP}
MODEL_NAME=ctr_lr
ITEMS=200 SHARED=300 PER_ITEM=200

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

command -v redis-server >/dev/null || die "redis-server is not installed (deploy/install-deps.sh)"
command -v python3 >/dev/null || die "python3 is needed (ports, JSON, summary)"

# ---- build (Release) --------------------------------------------------------------------------
EXES=(store/tlsnap server/tlserve server/lookup_floor loadgen/tlgen loadgen/redis_load
      loadgen/redis_adapter)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  say "configuring $BUILD (Release)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
say "building $BUILD"
cmake --build "$BUILD" -j"$(nproc)" --target tlsnap tlserve lookup_floor tlgen redis_load \
  redis_adapter >/dev/null
for exe in "${EXES[@]}"; do
  [ -x "$BUILD/$exe" ] || die "$BUILD/$exe is not built (hiredis missing? see deploy/install-deps.sh)"
done
BUILD=$(readlink -f "$BUILD")

# ---- processes, cleanup ------------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(readlink -f "$OUT")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tl_bench.XXXXXX")
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "bench: work dir kept: $WORK" >&2; else rm -rf -- "$WORK"; fi
  [ $rc -eq 0 ] || echo "bench: failed (exit $rc); logs so far in $OUT" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_port PORT PID NAME LOG: until PORT accepts connections (60 s), or PID dies.
wait_port() {
  for _ in $(seq 1 600); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),timeout=1).close()" \
      2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$4" >&2; die "$3 exited during start"; }
    sleep 0.1
  done
  die "$3 did not listen on port $1"
}
# json FILE KEY...: fields of the JSON object on the last line of FILE, space separated.
json() {
  python3 - "$@" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(" ".join(str(d[k]) for k in sys.argv[2:]))
PY
}

# ---- 1. model ----------------------------------------------------------------------------------
MODEL=$WORK/$MODEL_NAME/1
say "model: $KEYS keys"
"$BUILD/store/tlsnap" gen --keys "$KEYS" --out "$MODEL" --name "$MODEL_NAME" --seed 42 \
  >"$OUT/tlsnap_gen.txt"
tail -n 1 "$OUT/tlsnap_gen.txt" >&2
NKEYS=$("$BUILD/store/tlsnap" info "$MODEL" --brief | awk '$1 == "entries" {print $2}')
[ -n "$NKEYS" ] || die "tlsnap info gave no entry count"
REQ_IDS=$((SHARED + ITEMS * PER_ITEM))

# ---- 2. the floor (before any server runs: nothing else on the CPUs) -----------------------------
say "lookup floor: $REQ_IDS ids per batch, one thread"
"$BUILD/server/lookup_floor" --model "$MODEL" --keys "$REQ_IDS" --batches "${FLOOR_BATCHES:-500}" \
  --key-space "$NKEYS" --seed 42 >"$OUT/lookup_floor.txt"
tail -n 2 "$OUT/lookup_floor.txt" | head -n 1 >&2

# ---- 3. tlserve --------------------------------------------------------------------------------
TL_PORT=$(free_port); TL_ADMIN=$(free_port)
say "tlserve --workers 2 on 127.0.0.1:$TL_PORT"
"$BUILD/server/tlserve" --model "$MODEL" --port "$TL_PORT" --admin-port "$TL_ADMIN" --workers 2 \
  >"$OUT/tlserve.log" 2>&1 &
PIDS+=($!)
wait_port "$TL_ADMIN" "$!" tlserve "$OUT/tlserve.log"
for _ in $(seq 1 3000); do   # the admin port is up before the model is: wait for readiness
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$TL_ADMIN/readyz', timeout=1)" \
    2>/dev/null && break
  sleep 0.2
done

# ---- 4. Redis, loaded; the adapter ------------------------------------------------------------
R_PORT=$(free_port)
say "redis-server on 127.0.0.1:$R_PORT (no persistence)"
redis-server --bind 127.0.0.1 --port "$R_PORT" --save '' --appendonly no --dir "$WORK" \
  --daemonize no --protected-mode yes --logfile "$OUT/redis.log" >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$R_PORT" "$!" redis-server "$OUT/redis.log"
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')

say "redis_load: $NKEYS keys"
"$BUILD/loadgen/redis_load" --snapshot "$MODEL" --redis-port "$R_PORT" --pipeline 1000 \
  | tee "$OUT/redis_load.txt" | sed -n '2,3p' >&2

AD_PORT=$(free_port)
say "redis_adapter --threads $ADAPTER_THREADS on 127.0.0.1:$AD_PORT"
"$BUILD/loadgen/redis_adapter" --port "$AD_PORT" --redis-port "$R_PORT" \
  --threads "$ADAPTER_THREADS" --model "$MODEL_NAME" >"$OUT/redis_adapter.log" 2>&1 &
PIDS+=($!)
wait_port "$AD_PORT" "$!" redis_adapter "$OUT/redis_adapter.log"

# ---- 5. the load -------------------------------------------------------------------------------
# run_tlgen NAME PORT RATE: one tlgen run; its output (JSON last) in $OUT/NAME_rRATE.txt.
run_tlgen() {
  local f="$OUT/$1_r$3.txt" rc=0
  "$BUILD/loadgen/tlgen" --port "$2" --model "$MODEL_NAME" --rate "$3" --duration "$DURATION" \
    --warmup "$WARMUP" --connections "$CONNECTIONS" --items "$ITEMS" --shared "$SHARED" \
    --per-item "$PER_ITEM" --key-space "$NKEYS" --seed 42 --timeout-ms "$TIMEOUT_MS" --json >"$f" 2>&1 || rc=$?
  # 0 valid, 3 invalid (the sender fell behind): both are results; anything else is not
  if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
    cat "$f" >&2; die "tlgen against $1 at $3 req/s failed (exit $rc)"
  fi
  json "$f" p50_us p99_us p999_us valid errors | {
    read -r p50 p99 p999 valid errors
    printf '   %-8s %5s req/s: p50 %9.0f us  p99 %9.0f us  p99.9 %9.0f us  valid %s  errors %s\n' \
      "$1" "$3" "$p50" "$p99" "$p999" "$valid" "$errors" >&2
  }
}
IFS=', ' read -r -a RATE_LIST <<<"$RATES"
for rate in "${RATE_LIST[@]}"; do
  say "rate $rate req/s: ${DURATION}s measured (+${WARMUP}s warm-up) each"
  run_tlgen tlserve "$TL_PORT" "$rate"
  run_tlgen redis "$AD_PORT" "$rate"
  sleep 1 # a saturated adapter drops the closed connections' backlog before the next run
done

# ---- 6. summary --------------------------------------------------------------------------------
GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || GIT="$GIT (with uncommitted changes)"
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
MEM=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
python3 - "$OUT" "$RATES" "$KEYS" "$NKEYS" "$DURATION" "$WARMUP" "$CONNECTIONS" \
  "$ADAPTER_THREADS" "$REQ_IDS" "$GIT" "$CPU" "$(nproc)" "$MEM" "$REDIS_VERSION" "$STAMP" \
  "$TIMEOUT_MS" <<'PY'
import json, os, sys
(out, rates, keys, nkeys, dur, warm, conns, athreads, req_ids, git, cpu, ncpu, mem, rver,
 stamp, timeout_ms) = sys.argv[1:]
timeout_us = float(timeout_ms) * 1000

def last_json(name):
    with open(os.path.join(out, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])

floor = last_json("lookup_floor.txt")
load = last_json("redis_load.txt")
rows, rates = [], [r for r in rates.replace(",", " ").split() if r]
for r in rates:
    t, a = last_json("tlserve_r%s.txt" % r), last_json("redis_r%s.txt" % r)
    rows.append((r, t, a))

def us(x):  # microseconds as written, or ms / s for large values
    if x < 10000:
        return "%.0f" % x
    return "%.1f ms" % (x / 1000) if x < 1e6 else "%.2f s" % (x / 1e6)

def v(d):
    s = "yes" if d["valid"] else "NO"
    if d["errors"]:
        s += ", %d errors" % d["errors"]
    return s

# tlgen's percentiles cover answered requests only.  A request never answered in time is
# slower than any answer: when more than (100 - q)% of the scheduled requests went unanswered,
# the q-th percentile over all requests is at least the timeout.
def pct(d, key, q):
    missing = d["scheduled"] - d["ok"]
    if d["scheduled"] and missing / d["scheduled"] > 1 - q / 100:
        return None
    return d[key]

def cell(x, d):
    if x is None:
        return ">= %s (timeout)" % us(timeout_us)
    return us(x) + ("*" if d["ok"] < d["scheduled"] else "")

def answered(d):
    return "%d/%d" % (d["ok"], d["scheduled"])

L = []
L.append("# tlserve vs a Redis-backed service — %s" % stamp)
L.append("")
L.append("Standard request: %s items, %s shared + %s per-item ids = %s ids (binary values), "
         "ids uniform over the model's %s keys. Open loop (tlgen, constant arrivals, %s "
         "connections, %s s measured after %s s warm-up); latency is from each request's due "
         "time (corrected), in microseconds." % (
             rows[0][1]["items"] if rows else 200, 300, 200, req_ids, nkeys, conns, dur, warm))
L.append("")
L.append("- **tlserve**: 2 workers, the snapshot in its own store.")
L.append("- **Redis adapter**: redis_adapter (%s worker threads, one hiredis connection each) "
         "speaking our wire format; each request fetches its %d weights (bias + ids) from "
         "Redis %s with pipelined MGETs of 1000 keys (all sent before the first reply is "
         "read), missing keys = 0, scored like model/model.c, answered with version 1." % (
             athreads, int(req_ids) + 1, rver))
L.append("- Machine: %s x %s, %s, loopback only; load generator, servers and Redis share "
         "these cores. Commit %s." % (ncpu, cpu, mem, git))
L.append("")
L.append("| offered req/s | tlserve p50 | p99 | p99.9 | answered | valid | Redis p50 | p99 "
         "| p99.9 | answered | valid | p99 ratio Redis/tlserve |")
L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r, t, a in rows:
    tp = [pct(t, k, q) for k, q in (("p50_us", 50), ("p99_us", 99), ("p999_us", 99.9))]
    ap = [pct(a, k, q) for k, q in (("p50_us", 50), ("p99_us", 99), ("p999_us", 99.9))]
    if tp[1] is None or not tp[1]:
        ratio = "n/a"
    elif ap[1] is None:
        ratio = ">= %.0fx" % (timeout_us / tp[1])
    else:
        ratio = "%.1fx" % (ap[1] / tp[1])
    L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r, cell(tp[0], t), cell(tp[1], t), cell(tp[2], t), answered(t), v(t),
        cell(ap[0], a), cell(ap[1], a), cell(ap[2], a), answered(a), v(a), ratio))
L.append("")
L.append("answered = responses within the %s timeout / requests due in the measured span. "
         "`*`: some requests went unanswered, so the figure (over answered requests only) "
         "understates the true percentile; `>= timeout`: more requests went unanswered than "
         "the percentile leaves out." % us(timeout_us))
L.append("")
L.append("Completed req/s (responses per measured second): " + "; ".join(
    "%s: tlserve %.1f, Redis %.1f" % (r, t["completed_rps"], a["completed_rps"])
    for r, t, a in rows) + ".")
L.append("")
L.append("**Lowest possible lookup time for one request**: %s us p50 (p99 %s us) — "
         "`lookup_floor`, one `store_lookup_batch` of %s ids on one thread, same snapshot." % (
             us(floor["floor_p50_us"]), us(floor["floor_p99_us"]), req_ids))
L.append("")
L.append("Memory for the same %s keys: Redis `used_memory` %.1f bytes/key; tlserve's store "
         "%.1f bytes/key (raw: 12). redis_load put them into Redis at %.0f keys/s "
         "(MSET x 1000, binary keys and values)." % (
             nkeys, load["redis_bytes_per_key"], load["store_bytes_per_key"],
             load["keys_per_s"]))
L.append("")
L.append("`valid` is tlgen's verdict on its own schedule (the sender kept up); errors count "
         "ERROR frames, timeouts and disconnects. A p99 that grows with the run length at a "
         "rate means the server is saturated there (requests queue). Raw output: "
         "`tlserve_r*.txt`, `redis_r*.txt`, `lookup_floor.txt`, `redis_load.txt` in this folder.")
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(L) + "\n")
PY
say "summary: $OUT/summary.md"
cat "$OUT/summary.md"
