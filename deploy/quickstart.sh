#!/usr/bin/env bash
# quickstart.sh — from a fresh clone on Debian 12: install the dependencies, build
# tlserve, generate a synthetic 10M-key LR model, inspect and verify it, run the store
# benchmark, then serve the model with tlserve, send it standard ranking requests through
# the client library (tlpredict), print scores, latency and the server's own figures, and
# stop it; last, the short benchmark suite (QUICK=1 loadgen/bench.sh: the max rate at p99
# <= 2 ms, a sweep, plots, the Redis peer at 10 and 20 req/s) on the same build, whose
# summary table is printed at the end. Run as root (or a user with sudo); works from any
# directory.
#
#   QS_KEYS=100M ./deploy/quickstart.sh     # a bigger model (default 10M)
#   QS_JOBS=4    ./deploy/quickstart.sh     # build parallelism (default: nproc)
#   QS_BENCH=0   ./deploy/quickstart.sh     # skip the benchmark step (about a minute)
#
# The model is written under build/ and removed at exit; the build stays in build/; the
# benchmark's results (summary.md, plots, raw tlgen output) go to results/<date>/.
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
ROOT=$(pwd)
KEYS=${QS_KEYS:-10M}
JOBS=${QS_JOBS:-$(nproc)}
BUILD=build

step_no=0
step() {
  step_no=$((step_no + 1))
  printf '\n==== [%d] %s ====\n' "$step_no" "$*"
}

start=$(date +%s)
echo "tlserve quickstart in $ROOT ($(uname -sr), $(nproc) cores)"

step "install dependencies (deploy/install-deps.sh)"
./deploy/install-deps.sh

step "configure ($BUILD/, RelWithDebInfo)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo

step "build (-j$JOBS)"
cmake --build "$BUILD" -j"$JOBS"

TLSNAP=$BUILD/store/tlsnap
TLSYNTH=$BUILD/model/tlsynth
BENCH=$BUILD/store/store_bench
for bin in "$TLSNAP" "$TLSYNTH" "$BENCH"; do
  [ -x "$bin" ] || { echo "quickstart: $bin was not built" >&2; exit 1; }
done

# The model goes in a fresh directory inside the build tree, removed however we exit.
MODEL_TMP=$(mktemp -d "$ROOT/$BUILD/quickstart.XXXXXX")
cleanup() { rm -rf -- "$MODEL_TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM # bash runs no EXIT trap when a signal kills it: exit instead
MODEL=$MODEL_TMP/ctr_lr/1

step "generate a synthetic LR model: $KEYS keys (tlsynth model)"
"$TLSYNTH" model --keys "$KEYS" --out "$MODEL" --kind lr --name ctr_lr --version 1 --seed 42

step "inspect the snapshot (tlsnap info)"
"$TLSNAP" info "$MODEL"
KEYS_N=$("$TLSNAP" info "$MODEL" --brief | awk '$1 == "entries" {print $2}')

step "load and verify the snapshot: checksums, keys, lookups (tlsnap verify)"
"$TLSNAP" verify "$MODEL"

step "store benchmark: $KEYS keys (store_bench --json; its snapshot goes in the same temp dir)"
# store_bench prints "name: value" lines as it goes and, with --json, a last line that
# is one JSON object of the headline figures; that line is kept in build/.
BENCH_LOG=$MODEL_TMP/store_bench.log
BENCH_JSON=$BUILD/quickstart-store_bench.json
"$BENCH" --keys "$KEYS" --tmp "$MODEL_TMP" --json | tee "$BENCH_LOG"
tail -n 1 "$BENCH_LOG" >"$BENCH_JSON"

step "figures"
if command -v python3 >/dev/null; then
  python3 - "$BENCH_JSON" <<'EOF'
import json, sys

try:
    figures = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit(f"quickstart: the last line of store_bench's output is not JSON: {e}")

def show(obj, indent="  "):
    for k, v in obj.items():
        if isinstance(v, dict):
            print(f"{indent}{k}:")
            show(v, indent + "  ")
        else:
            print(f"{indent}{k:<32} {v}")

show(figures)
EOF
else
  cat "$BENCH_JSON"
fi
echo "(saved as $BENCH_JSON)"

step "serve the model: tlserve on 127.0.0.1, scores through the client library"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
ADMIN_PORT=$(free_port)
while [ "$ADMIN_PORT" = "$PORT" ]; do ADMIN_PORT=$(free_port); done
"$BUILD/server/tlserve" --model "$MODEL" --port "$PORT" --admin-port "$ADMIN_PORT" \
  >"$MODEL_TMP/tlserve.log" 2>&1 &
SERVER_PID=$!
cleanup() {
  if [ -n "${SERVER_PID:-}" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf -- "$MODEL_TMP"
}
ready=0
for _ in $(seq 1 300); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$ADMIN_PORT/readyz', timeout=1)" 2>/dev/null; then
    ready=1
    break
  fi
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  echo "quickstart: tlserve did not become ready:" >&2
  cat "$MODEL_TMP/tlserve.log" >&2
  exit 1
fi
cat "$MODEL_TMP/tlserve.log"
echo "sending 300 standard requests (200 items, 300 shared + 200 per-item features) with tlpredict:"
"$BUILD/codec/tlpredict" --port "$PORT" --model ctr_lr --requests 300 --key-space "$KEYS_N" --seed 42
python3 - "$ADMIN_PORT" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
want = ("tlserve_predict_total", "tlserve_items_total", "tlserve_errors_total",
        "tlserve_request_latency_quantile_seconds")
print("server metrics (http://127.0.0.1:%s/metrics):" % sys.argv[1])
for line in text.splitlines():
    if line.startswith(want):
        name, value = line.rsplit(" ", 1)
        if "latency" in name:
            print("  %-60s %8.0f us" % (name, float(value) * 1e6))
        else:
            print("  %-60s %8s" % (name, value))
PY
kill "$SERVER_PID"
rc=0
wait "$SERVER_PID" || rc=$?
SERVER_PID=
if [ "$rc" != 0 ]; then
  echo "quickstart: tlserve exited $rc on SIGTERM (0 expected); its log:" >&2
  cat "$MODEL_TMP/tlserve.log" >&2 || true
  exit 1
fi
echo "tlserve stopped (SIGTERM, exit 0)"

if [ "${QS_BENCH:-1}" != 0 ]; then
  step "benchmark suite, short version (QUICK=1 loadgen/bench.sh, on $BUILD/)"
  # bench.sh writes progress to stderr and the summary to stdout: the summary is printed below.
  BENCH_OUT=$ROOT/results/quickstart-$(date +%Y-%m-%d_%H%M%S)
  QUICK=1 BUILD="$BUILD" RESULTS="$BENCH_OUT" ./loadgen/bench.sh >/dev/null
  echo
  cat "$BENCH_OUT/summary.md"
  echo "(summary, plots and raw output in $BENCH_OUT)"
fi

step "done"
echo "quickstart: OK in $(($(date +%s) - start)) s; binaries in $ROOT/$BUILD (model dir removed)"
