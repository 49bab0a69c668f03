#!/usr/bin/env bash
# bench.sh — the benchmark suite, in one run on one machine.  For each model kind in MODELS
# (default: lr, fm, dnn — the issue's standard models; ffm can be added), one after another:
#   1. tlsynth model: a synthetic model in a temp dir — LR with KEYS keys (100M), FM k=16 with
#      FM_KEYS (20M), DNN (26 fields x 16 dims, 416 -> 256 -> 128 -> 1, wide) with DNN_KEYS (20M),
#      FFM (20 fields, k=4) with FFM_KEYS (20M);
#   2. lookup_floor on that snapshot: the store's batched lookup of one standard request's ids
#      (40,300) on one thread — the lowest possible lookup time for one request (the physical
#      limit line);
#   3. tlserve $SERVE_ARGS (default --workers 1 --lookup-threads 1: one I/O worker and one
#      thread that shares each request's lookups with it) serves the snapshot, and tlgen
#      (open loop, the standard request: 200 items, 300 shared + 200 per-item ids) measures it:
#      a. max-rate search: the highest offered rate with a valid run, <= 0.1% errors and a
#         corrected p99 <= P99_BOUND_US (2 ms), each probe WARMUP + DURATION seconds;
#      b. a sweep at SWEEP_PCTS percent of that rate (25..125%), JSON and one HdrHistogram
#         spectrum per rate;
#      c. loadgen/plot.sh draws the sweep (latency vs throughput, spectra) and the search's
#         probes into the results folder (SVG + PNG; skipped without gnuplot);
#      d. p50/p99/p99.9 at half the max rate (the sweep's 50% point);
#      then tlserve stops (one model in memory at a time).
#   4. the Redis peer (when MODELS has lr): redis-server (loopback, free port, no persistence)
#      gets the LR weights through redis_load (one binary key per id, MSET batches);
#      redis_adapter serves our wire format from it (pipelined MGETs per request, tlserve's
#      scoring); tlgen sends the standard request at PEER_RATES to the adapter, and to tlserve
#      (while it served LR) at those rates the sweep did not run;
#   5. results/<date>/summary.md: header (date, machine, build), a summary table (one row per
#      model), the per-model tables, the peer table, links to the plots; every tlgen output
#      (JSON last), spectrum and log in the same folder.  The summary is printed at the end
#      (stdout; progress goes to stderr).
# Everything started here is stopped on exit, on failure and on Ctrl-C.
#
# Usage: loadgen/bench.sh            the suite above
#        loadgen/bench.sh reload     reload under load: one full swap and ten 1% deltas applied
#                                    while tlgen sends at half the max rate; windows, apply
#                                    rate, memory (loadgen/reload_bench.py; its env there)
#        loadgen/bench.sh online     online learning: online equals offline, trainer throughput,
#                                    PREDICT p99 with training on/off, freshness
#                                    (loadgen/online_bench.py; its env there)
#        loadgen/bench.sh sync       partitioned replicas (2 and 4): bytes on the bus against
#                                    fp32 updates, logloss of 1-bit against --sync-exact
#                                    (loadgen/sync_bench.py; its env there)
#        loadgen/bench.sh quality    training quality: tltrain's defaults, every kind on every
#                                    set in ../shared/data (model/bench/quality.sh; its env there)
# Env:   MODELS=lr,fm,dnn   KEYS=100M (LR)  FM_KEYS=20M  DNN_KEYS=20M  FFM_KEYS=20M
#        DURATION=5 (s measured per search probe, sweep rate and peer run)  WARMUP=2
#        P99_BOUND_US=2000  SEARCH_FROM=20  SEARCH_TO=100000 (req/s, tlgen --search-*)
#        SWEEP_PCTS="25,50,75,100,125" (percent of the max rate; 50 is the half-rate point)
#        PEER_RATES="10,20,sweep" (req/s for the Redis comparison; "sweep" adds the sweep's rates)
#        QUICK=1    short run (about a minute): MODELS=lr KEYS=1M DURATION=2 WARMUP=1
#                   SEARCH_FROM=50 SWEEP_PCTS=50,100,125 PEER_RATES=10,20 TIMEOUT_MS=5000
#                   FLOOR_BATCHES=200 (explicit env still wins; e.g. QUICK=1 MODELS=lr,fm,dnn
#                   FM_KEYS=1M DNN_KEYS=1M for a short run of all three)
#        BUILD=build-release (configured Release if it has no CMakeCache.txt; any configured
#        build dir works, e.g. BUILD=build from deploy/quickstart.sh)
#        SERVE_ARGS="--workers 1 --lookup-threads 1" (tlserve's data-plane flags)
#        ADAPTER_THREADS=2  CONNECTIONS=4  TIMEOUT_MS=10000 (tlgen)  FLOOR_BATCHES=500
#        RESULTS=results/<date>   KEEP_WORK=1 keeps the temp dir (model, logs) and prints its path
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
ROOT=$PWD
if [ "${1:-}" = reload ]; then shift; exec python3 loadgen/reload_bench.py "$@"; fi
if [ "${1:-}" = online ]; then shift; exec python3 loadgen/online_bench.py "$@"; fi
if [ "${1:-}" = sync ]; then shift; exec python3 loadgen/sync_bench.py "$@"; fi
if [ "${1:-}" = quality ]; then shift; exec model/bench/quality.sh "$@"; fi
T0=$(date +%s)
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)   # before we start anything: other load on the machine

if [ "${QUICK:-0}" = 1 ]; then
  MODELS=${MODELS:-lr}; KEYS=${KEYS:-1M}; DURATION=${DURATION:-2}; WARMUP=${WARMUP:-1}
  SWEEP_PCTS=${SWEEP_PCTS:-50,100,125}; PEER_RATES=${PEER_RATES:-10,20}
  TIMEOUT_MS=${TIMEOUT_MS:-5000}; FLOOR_BATCHES=${FLOOR_BATCHES:-200}
  SEARCH_FROM=${SEARCH_FROM:-50}   # 100 samples per 2 s probe: a p99 worth the name
fi
MODELS=${MODELS:-lr,fm,dnn}
KEYS=${KEYS:-100M}
FM_KEYS=${FM_KEYS:-20M}
DNN_KEYS=${DNN_KEYS:-20M}
FFM_KEYS=${FFM_KEYS:-20M}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
P99_BOUND_US=${P99_BOUND_US:-2000}
SEARCH_FROM=${SEARCH_FROM:-20}
SEARCH_TO=${SEARCH_TO:-100000}
SWEEP_PCTS=${SWEEP_PCTS:-25,50,75,100,125}
PEER_RATES=${PEER_RATES:-10,20,sweep}
FLOOR_BATCHES=${FLOOR_BATCHES:-500}
BUILD=${BUILD:-build-release}
ADAPTER_THREADS=${ADAPTER_THREADS:-2}
CONNECTIONS=${CONNECTIONS:-4}
export SERVE_ARGS=${SERVE_ARGS:---workers 1 --lookup-threads 1}
TIMEOUT_MS=${TIMEOUT_MS:-10000}
STAMP=$(date +%Y-%m-%d_%H%M%S)
OUT=${RESULTS:-results/$STAMP}
ITEMS=200 SHARED=300 PER_ITEM=200

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

command -v redis-server >/dev/null || die "redis-server is not installed (deploy/install-deps.sh)"
command -v python3 >/dev/null || die "python3 is needed (ports, JSON, summary)"

# ---- build -------------------------------------------------------------------------------------
EXES=(store/tlsnap model/tlsynth server/tlserve server/lookup_floor loadgen/tlgen loadgen/redis_load
      loadgen/redis_adapter)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  say "configuring $BUILD (Release)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
say "building $BUILD"
cmake --build "$BUILD" -j"$(nproc)" --target tlsnap tlsynth tlserve lookup_floor tlgen redis_load \
  redis_adapter >/dev/null
for exe in "${EXES[@]}"; do
  [ -x "$BUILD/$exe" ] || die "$BUILD/$exe is not built (hiredis missing? see deploy/install-deps.sh)"
done
BUILD=$(readlink -f "$BUILD")
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")

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

# ---- 1-3. each model: generate, floor, serve, search, sweep, plots ------------------------------
REQ_IDS=$((SHARED + ITEMS * PER_ITEM))
# tlsynth model arguments per kind (the issue's standard models).
gen_args() {
  case $1 in
    lr) echo "--kind lr --value-floats 1" ;;
    fm) echo "--kind fm --value-floats 17" ;;                                   # k = 16
    ffm) echo "--kind ffm --value-floats 81 --param fields=20 --param k=4 --param norm=1" ;;
    dnn) echo "--kind dnn --value-floats 17 --param fields=26 --param dim=16" \
              "--param hidden=256,128 --param wide=1 --mlp 416,256,128,1" ;;
    *) die "MODELS: unknown kind '$1' (lr, fm, ffm, dnn)" ;;
  esac
}
keys_of() {
  case $1 in lr) echo "$KEYS" ;; fm) echo "$FM_KEYS" ;; ffm) echo "$FFM_KEYS" ;; dnn) echo "$DNN_KEYS" ;; esac
}

# tlgen_std ARGS...: tlgen with the standard request and the current model's settings.
tlgen_std() {
  "$BUILD/loadgen/tlgen" --model "$MODEL_NAME" --duration "$DURATION" --warmup "$WARMUP" \
    --connections "$CONNECTIONS" --items "$ITEMS" --shared "$SHARED" --per-item "$PER_ITEM" \
    --key-space "$NKEYS" --seed 42 --timeout-ms "$TIMEOUT_MS" --json "$@"
}
# check_rc RC WHAT FILE: 0 valid, 3 invalid (fell behind / nothing passed) are results.
check_rc() {
  if [ "$1" -ne 0 ] && [ "$1" -ne 3 ]; then cat "$3" >&2; die "tlgen $2 failed (exit $1)"; fi
}
# run_tlgen NAME PORT RATE: one tlgen run; its output (JSON last) in $OUT/NAME_rRATE.txt.
run_tlgen() {
  local f="$OUT/$1_r$3.txt" rc=0
  tlgen_std --port "$2" --rate "$3" >"$f" 2>&1 || rc=$?
  check_rc $rc "against $1 at $3 req/s" "$f"
  json "$f" p50_us p99_us p999_us valid errors ok scheduled | {
    read -r p50 p99 p999 valid errors ok sched
    printf '   %-8s %5s req/s: p50 %9.0f us  p99 %9.0f us  p99.9 %9.0f us  answered %s/%s  valid %s  errors %s\n' \
      "$1" "$3" "$p50" "$p99" "$p999" "$ok" "$sched" "$valid" "$errors" >&2
  }
}
# search K: the max-rate search for model K into $OUT/K_search.txt; sets MAX_RPS.  (tlgen's
# search keeps doubling past a single failed probe: at low rates an idle server runs cold.)
search() {
  local k=$1 rc=0
  SEARCH_AT=$SEARCH_FROM
  say "$k: max-rate search: corrected p99 <= $P99_BOUND_US us, probes from $SEARCH_AT req/s," \
    "${DURATION}s (+${WARMUP}s warm-up) each"
  tlgen_std --port "$TL_PORT" --search-p99-us "$P99_BOUND_US" --search-from "$SEARCH_AT" \
    --search-to "$SEARCH_TO" >"$OUT/${k}_search.txt" 2>&1 || rc=$?
  check_rc $rc "max-rate search" "$OUT/${k}_search.txt"
  grep '^max rate' "$OUT/${k}_search.txt" >&2 || true
  MAX_RPS=$(json "$OUT/${k}_search.txt" max_rps)
}
# sweep K: SWEEP_PCTS percent of the max (when no probe passed: of the probe rate with the
# lowest p99), whole req/s, into $OUT/K_sweep.txt and $OUT/spectra/K/; sets SWEEP_RATES and
# SWEEP_BASE; draws the plots.
sweep() {
  local k=$1 rc=0
  SWEEP_BASE=$(python3 - "$OUT/${k}_search.txt" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
if d["max_rps"] > 0:
    print(d["max_rps"])
else:
    ok = [p for p in d["probes"] if p.get("ok")]
    best = min(ok, key=lambda p: p["p99_us"]) if ok else d["probes"][0]
    print(best["offered_rps"])
PY
)
  echo "$SWEEP_BASE" >"$OUT/${k}_sweep_base.txt"
  SWEEP_RATES=$(python3 - "$SWEEP_BASE" "$SWEEP_PCTS" <<'PY'
import sys
base, pcts = float(sys.argv[1]), sys.argv[2]
rates = []
for p in pcts.replace(",", " ").split():
    r = max(1, int(round(base * float(p) / 100)))
    if r not in rates:
        rates.append(r)
print(",".join(str(r) for r in rates))
PY
)
  echo "$SWEEP_RATES" >"$OUT/${k}_sweep_rates.txt"
  say "$k: sweep: $SWEEP_RATES req/s (${SWEEP_PCTS// /,} % of $SWEEP_BASE), ${DURATION}s (+${WARMUP}s) each"
  mkdir -p "$OUT/spectra/$k"
  tlgen_std --port "$TL_PORT" --sweep "$SWEEP_RATES" --spectrum-dir "$OUT/spectra/$k" \
    >"$OUT/${k}_sweep.txt" 2>&1 || rc=$?
  check_rc $rc sweep "$OUT/${k}_sweep.txt"
  sed -n '/^ *offered/,/^$/p' "$OUT/${k}_sweep.txt" | grep -v '^{' >&2 || true
  if command -v gnuplot >/dev/null; then
    local spectra=() r
    IFS=, read -r -a SR <<<"$SWEEP_RATES"
    for r in "${SR[@]}"; do
      [ -f "$OUT/spectra/$k/spectrum-${r}rps.hgrm" ] && spectra+=("$OUT/spectra/$k/spectrum-${r}rps.hgrm")
    done
    if loadgen/plot.sh "$OUT/${k}_sweep.txt" "${spectra[@]}" "$OUT/${k}_sweep" >>"$OUT/plot.log" 2>&1 &&
       loadgen/plot.sh "$OUT/${k}_search.txt" "$OUT/${k}_search" >>"$OUT/plot.log" 2>&1; then
      touch "$OUT/${k}_plots.ok"
    else
      cat "$OUT/plot.log" >&2; say "plot.sh failed: the summary has no $k plots"
    fi
  fi
}
# start_tlserve DIR NAME: tlserve $SERVE_ARGS on free ports, ready to serve; sets TL_PORT, TL_PID.
start_tlserve() {
  TL_PORT=$(free_port); TL_ADMIN=$(free_port)
  say "$2: tlserve $SERVE_ARGS on 127.0.0.1:$TL_PORT"
  # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
  "$BUILD/server/tlserve" --model "$1" --port "$TL_PORT" --admin-port "$TL_ADMIN" $SERVE_ARGS \
    >"$OUT/$2_tlserve.log" 2>&1 &
  TL_PID=$!
  PIDS+=("$TL_PID")
  wait_port "$TL_ADMIN" "$TL_PID" tlserve "$OUT/$2_tlserve.log"
  local ready=0
  for _ in $(seq 1 3000); do   # the admin port is up before the model is: wait for readiness
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$TL_ADMIN/readyz', timeout=1)" \
      2>/dev/null; then ready=1; break; fi
    kill -0 "$TL_PID" 2>/dev/null || break
    sleep 0.2
  done
  [ $ready = 1 ] || { cat "$OUT/$2_tlserve.log" >&2; die "tlserve did not become ready"; }
}
stop_tlserve() {
  kill "$TL_PID" 2>/dev/null || true
  wait "$TL_PID" 2>/dev/null || true
}

command -v gnuplot >/dev/null || say "gnuplot not installed (apt-get install gnuplot-nox): no plots"
IFS=, read -r -a KINDS <<<"${MODELS// /,}"
for K in "${KINDS[@]}"; do
  MODEL_NAME=ctr_$K
  MODEL=$WORK/$MODEL_NAME/1
  # shellcheck disable=SC2046
  say "$K: model, $(keys_of "$K") keys"
  "$BUILD/model/tlsynth" model --keys "$(keys_of "$K")" --out "$MODEL" --name "$MODEL_NAME" \
    --seed 42 $(gen_args "$K") >"$OUT/${K}_tlsynth_model.txt"
  tail -n 1 "$OUT/${K}_tlsynth_model.txt" >&2
  NKEYS=$("$BUILD/store/tlsnap" info "$MODEL" --brief | awk '$1 == "entries" {print $2}')
  [ -n "$NKEYS" ] || die "tlsnap info gave no entry count"
  echo "$NKEYS" >"$OUT/${K}_keys.txt"
  # the floor, before this model's server runs: nothing else on the CPUs
  say "$K: lookup floor: $REQ_IDS ids per batch, one thread, $FLOOR_BATCHES batches"
  "$BUILD/server/lookup_floor" --model "$MODEL" --keys "$REQ_IDS" --batches "$FLOOR_BATCHES" \
    --key-space "$NKEYS" --seed 42 >"$OUT/${K}_lookup_floor.txt"
  tail -n 2 "$OUT/${K}_lookup_floor.txt" | head -n 1 >&2
  start_tlserve "$MODEL" "$K"
  search "$K"
  sweep "$K"
  if [ "$K" = lr ]; then
    LR_MODEL=$MODEL LR_NKEYS=$NKEYS LR_SWEEP_RATES=$SWEEP_RATES
    # tlserve at the Redis comparison's rates the sweep did not cover
    PEER_LIST=$(python3 - "$PEER_RATES" "$SWEEP_RATES" <<'PY'
import sys
out = []
for t in sys.argv[1].replace(",", " ").split():
    for r in (sys.argv[2].split(",") if t == "sweep" else [t]):
        r = "%g" % float(r)
        if r not in out:
            out.append(r)
print(" ".join(sorted(out, key=float)))
PY
)
    for rate in $PEER_LIST; do
      case ",$SWEEP_RATES," in *",$rate,"*) continue ;; esac
      say "lr: tlserve at $rate req/s (a peer rate outside the sweep)"
      run_tlgen tlserve "$TL_PORT" "$rate"
    done
  fi
  stop_tlserve
  [ "$K" = lr ] || rm -rf -- "$WORK/$MODEL_NAME"   # disk for the next model; Redis reads LR's
done

# ---- 4. Redis, loaded; the adapter; the peer runs (with the LR model) --------------------------
REDIS_VERSION=none
if [ -n "${LR_MODEL:-}" ]; then
  MODEL_NAME=ctr_lr MODEL=$LR_MODEL NKEYS=$LR_NKEYS
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

  for rate in $PEER_LIST; do
    say "Redis adapter at $rate req/s: ${DURATION}s measured (+${WARMUP}s warm-up)"
    run_tlgen redis "$AD_PORT" "$rate"
    sleep 1 # a saturated adapter drops the closed connections' backlog before the next run
  done
fi

# ---- 5. summary --------------------------------------------------------------------------------
GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || GIT="$GIT (with uncommitted changes)"
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
MEM=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
OS=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)
python3 - "$OUT" "${MODELS// /,}" "${PEER_LIST:-}" "$SWEEP_PCTS" "$DURATION" "$WARMUP" \
  "$CONNECTIONS" "$ADAPTER_THREADS" "$REQ_IDS" "$GIT" "$CPU" "$(nproc)" "$MEM" "$REDIS_VERSION" \
  "$STAMP" "$TIMEOUT_MS" "$P99_BOUND_US" "$BUILD_TYPE" "$(basename "$BUILD")" "$OS $(uname -r)" \
  "${QUICK:-0}" "$(date '+%Y-%m-%d %H:%M %Z')" "$(($(date +%s) - T0))" "$LOADAVG" <<'PY'
import json, os, sys
(out, models, peer_list, sweep_pcts, dur, warm, conns, athreads, req_ids, git, cpu, ncpu, mem,
 rver, stamp, timeout_ms, bound_us, build_type, build_dir, os_name, quick, date, elapsed,
 loadavg) = sys.argv[1:]
timeout_us = float(timeout_ms) * 1000
bound_us = float(bound_us)
kinds = [k for k in models.replace(",", " ").split()]
pcts = [float(p) for p in sweep_pcts.replace(",", " ").split()]
DESC = {
    "lr": "LR (1 float per key)",
    "fm": "FM, k = 16 (17 floats per key)",
    "ffm": "FFM, 20 fields x k = 4 (81 floats per key)",
    "dnn": "DNN, 26 fields x 16 dims, MLP 416 -> 256 -> 128 -> 1, wide part (17 floats per key)",
}

def path(name):
    return os.path.join(out, name)

def last_json(name):
    with open(path(name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])

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

def cu(x, d):  # cell() with its unit
    c = cell(x, d)
    if not c.rstrip("*").isdigit():
        return c
    return c.rstrip("*") + " us" + ("*" if c.endswith("*") else "")

def answered(d):
    return "%d/%d" % (d["ok"], d["scheduled"])

def three(d):
    return [pct(d, k, q) for k, q in (("p50_us", 50), ("p99_us", 99), ("p999_us", 99.9))]

class Model:
    def __init__(self, k):
        self.k = k
        self.nkeys = int(open(path(k + "_keys.txt")).read())
        self.floor = last_json(k + "_lookup_floor.txt")
        self.search = last_json(k + "_search.txt")
        self.sweep = last_json(k + "_sweep.txt")["sweep"]
        self.by_rate = {float(r["offered_rps"]): r for r in self.sweep}
        self.max_rps = self.search["max_rps"]
        rates = [float(r) for r in open(path(k + "_sweep_rates.txt")).read().split(",")]
        self.base = float(open(path(k + "_sweep_base.txt")).read())
        self.rates = list(zip(pcts, rates))
        self.half = None
        for p, r in self.rates:
            if p == 50 and r in self.by_rate:
                self.half = self.by_rate[r]

M = [Model(k) for k in kinds]

L = []
L.append("# tlserve benchmark — %s%s" % (stamp, " (QUICK=1: a short run)" if quick == "1" else ""))
L.append("")
L.append("- Date: %s; run time %s s; load average before the run: %s (other work on the "
         "machine shows here, and in the figures)." % (date, elapsed, loadavg))
L.append("- Machine: %s cores, %s, %s RAM, %s; loopback only; load generator, servers and Redis "
         "share these cores." % (ncpu, cpu, mem, os_name))
L.append("- Build: `%s/` (%s), commit %s." % (build_dir, build_type or "no build type", git))
L.append("- Load: tlgen, open loop (constant arrivals, %s connections), the standard request: 200 "
         "items, 300 shared + 200 per-item ids = %s ids (binary values), ids uniform over the "
         "model's keys; %s s measured after %s s warm-up per run (search probes included). "
         "Latency is corrected: from each request's due time. `tlserve %s`, one model "
         "at a time." % (conns, req_ids, dur, warm, os.environ["SERVE_ARGS"]))
L.append("")
L.append("## Summary")
L.append("")
L.append("| model | keys | max req/s with p99 <= %g ms | at half that rate: p50 / p99 / p99.9 us "
         "| lookup floor p50 us |" % (bound_us / 1000))
L.append("|---|---|---|---|---|")
for m in M:
    h = m.half
    L.append("| %s | %s | %s | %s | %s |" % (
        m.k.upper(), "{:,}".format(m.nkeys),
        "**%.0f**" % m.max_rps if m.max_rps > 0 else "none (%d probes, %.0f..%.0f req/s)"
        % (len(m.search["probes"]), min(p["offered_rps"] for p in m.search["probes"]),
           max(p["offered_rps"] for p in m.search["probes"])),
        " / ".join(cell(x, h) for x in three(h)) if h else "-", us(m.floor["floor_p50_us"])))
L.append("")
L.append("The lookup floor is the physical limit: one `store_lookup_batch` of the request's %s "
         "ids on one thread (`lookup_floor`, before the model's server ran) — the lowest possible "
         "time for one request's lookups." % "{:,}".format(int(req_ids)))
L.append("")

for m in M:
    k, search = m.k, m.search
    L.append("## %s model, %s keys" % (DESC.get(k, k.upper()), "{:,}".format(m.nkeys)))
    L.append("")
    if m.max_rps > 0:
        L.append("**Max rate with corrected p99 <= %s: %.0f req/s** (p99 there %s us; first "
                 "failing probe %s). Search: %d probes from %s req/s, each valid, <= 0.1%% errors "
                 "and p99 <= the bound to pass (`%s_search.txt`)." % (
                     "%g ms" % (bound_us / 1000), m.max_rps, us(search["p99_us_at_max"]),
                     ("%.0f req/s" % search["first_fail_rps"]) if search["first_fail_rps"]
                     else "none", len(search["probes"]),
                     "%.0f" % search["probes"][0]["offered_rps"], k))
    else:
        L.append("**No offered rate met corrected p99 <= %g ms** (%d probes, first: %.0f req/s, "
                 "%s). The sweep below is at percentages of the probe rate with the lowest "
                 "p99 (%.0f req/s)." % (bound_us / 1000, len(search["probes"]),
                                        search["probes"][0]["offered_rps"],
                                        search["probes"][0].get("fail_reason", ""), m.base))
    if os.path.exists(path(k + "_search_first.txt")):
        f1 = last_json(k + "_search_first.txt")["probes"][0]
        L.append("")
        L.append("A first search passed no probe (first %.0f req/s: %s); this is the second "
                 "search, from half that rate (`%s_search_first.txt`)." % (
                     f1["offered_rps"], f1.get("fail_reason", ""), k))
    L.append("")
    L.append("Probes (offered req/s: p99 us, pass): " + "; ".join(
        "%.0f: %s %s" % (p["offered_rps"], us(p["p99_us"]) if p["ok"] else "-",
                         "ok" if p.get("pass") else "fail") for p in search["probes"]) + ".")
    L.append("")
    if m.half is not None:
        h = three(m.half)
        L.append("**At %s (%.0f req/s offered, %.1f achieved): p50 %s, p99 %s, "
                 "p99.9 %s** (valid: %s)." % (
                     "half the max rate" if m.max_rps > 0 else "50% of the sweep's base rate",
                     m.half["offered_rps"], m.half["achieved_rps"], cu(h[0], m.half),
                     cu(h[1], m.half), cu(h[2], m.half), v(m.half)))
        L.append("")
    L.append("Sweep (`%s_sweep.txt`, spectra in `spectra/%s/`):" % (k, k))
    L.append("")
    L.append("| %% of %s | offered req/s" % ("max" if m.max_rps > 0 else "base rate") +
             " | achieved req/s | p50 us | p90 us | p99 us | p99.9 us | max us | answered | valid |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for p, r in m.rates:
        d = m.by_rate.get(r)
        if d is None:
            continue
        pp = three(d)
        L.append("| %s%s | %.0f | %.1f | %s | %s | %s | %s | %s | %s | %s |" % (
            "**" if p == 50 else "", "%g%%%s" % (p, "**" if p == 50 else ""), d["offered_rps"],
            d["achieved_rps"], cell(pp[0], d), cell(d["p90_us"], d), cell(pp[1], d),
            cell(pp[2], d), us(d["max_us"]), answered(d), v(d)))
    L.append("")
    if os.path.exists(path(k + "_plots.ok")):
        L.append("Plots: [latency vs throughput](%s_sweep-latency.svg) ([PNG](%s_sweep-latency.png)), "
                 "[latency by percentile](%s_sweep-spectrum.svg) ([PNG](%s_sweep-spectrum.png)), "
                 "[search probes](%s_search-latency.svg) ([PNG](%s_search-latency.png))." % ((k,) * 6))
        L.append("")
        L.append("![%s latency vs throughput](%s_sweep-latency.svg)" % (k, k))
    else:
        L.append("Plots: not drawn (gnuplot missing or plot.sh failed; see `plot.log`).")
    L.append("")
    L.append("Lookup floor: %s us p50 (p99 %s us) for %s ids (`%s_lookup_floor.txt`)." % (
        us(m.floor["floor_p50_us"]), us(m.floor["floor_p99_us"]), "{:,}".format(int(req_ids)), k))
    L.append("")

lr = next((m for m in M if m.k == "lr"), None)
if lr is None:
    L.append("## Peer: not run (the Redis comparison uses the LR model; MODELS has no lr)")
else:
    L.append("## Peer: tlserve vs a Redis-backed service, same offered rates (LR model)")
    L.append("")
    L.append("- **tlserve**: as above (figures at the sweep's rates are the sweep's runs).")
    L.append("- **Redis adapter**: redis_adapter (%s worker threads, one hiredis connection each) "
             "speaking our wire format; each request fetches its %d weights (bias + ids) from "
             "Redis %s with pipelined MGETs of 1000 keys (all sent before the first reply is "
             "read), missing keys = 0, scored like model/model.c, answered with version 1." % (
                 athreads, int(req_ids) + 1, rver))
    L.append("")
    L.append("| offered req/s | tlserve p50 | p99 | p99.9 | answered | valid | Redis p50 | p99 "
             "| p99.9 | answered | valid | p99 ratio Redis/tlserve |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for r in peer_list.split():
        t = lr.by_rate.get(float(r)) or last_json("tlserve_r%s.txt" % r)
        a = last_json("redis_r%s.txt" % r)
        rows.append((r, t, a))
        tp, ap = three(t), three(a)
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
             "`*`: some requests went unanswered (the server is overloaded at that rate), so the "
             "figure (over answered requests only) understates the true percentile; `>= timeout`: "
             "more requests went unanswered than the percentile leaves out." % us(timeout_us))
    L.append("")
    L.append("Completed req/s (responses per measured second): " + "; ".join(
        "%s: tlserve %.1f, Redis %.1f" % (r, t["completed_rps"], a["completed_rps"])
        for r, t, a in rows) + ".")
    L.append("")
    load = last_json("redis_load.txt")
    L.append("Memory for the same %s keys: Redis `used_memory` %.1f bytes/key; tlserve's store "
             "%.1f bytes/key (raw: 12). redis_load put them into Redis at %.0f keys/s "
             "(MSET x 1000, binary keys and values)." % (
                 "{:,}".format(lr.nkeys), load["redis_bytes_per_key"],
                 load["store_bytes_per_key"], load["keys_per_s"]))
L.append("")
L.append("`valid` is tlgen's verdict on its own schedule (the sender kept up); errors count "
         "ERROR frames, timeouts and disconnects. A p99 that grows with the run length at a "
         "rate means the server is saturated there (requests queue). Raw output in this folder: "
         "`<model>_search.txt`, `<model>_sweep.txt`, `spectra/<model>/`, `tlserve_r*.txt`, "
         "`redis_r*.txt`, `<model>_lookup_floor.txt`, `redis_load.txt`, logs.")
with open(path("summary.md"), "w") as f:
    f.write("\n".join(L) + "\n")
PY
say "summary: $OUT/summary.md ($(($(date +%s) - T0)) s)"
cat "$OUT/summary.md"
