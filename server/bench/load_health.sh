#!/usr/bin/env bash
# load_health.sh — does the admin plane stay responsive while a large model loads?
#   1. tlsynth model: a 1000-key model and an LR model of KEYS keys (default 100M) in a temp dir;
#   2. tlserve --workers 1 serves the small one; the large one is loaded through the admin API
#      (POST :load, 202, polled every 10 ms) while /healthz is polled every 10 ms;
#   3. prints one line: keys, load seconds (tlserve_model_load_seconds), healthz samples, how
#      many were not 200, slowest and p99 healthz answer in ms.
# The measurement is measure() of tests/integration/test_load_background.py, the same code the
# integration test runs at 2M keys.  Needs about 12 B/key of memory for the large model (in the
# server) and as much on disk under TMPDIR.
# Usage: server/bench/load_health.sh [--keys N] [BUILD_DIR]   (N: 100M, 2M, 5000000, ...)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
KEYS=100M
if [ "${1:-}" = "--keys" ]; then KEYS=$2; shift 2; fi
BUILD=$(readlink -f "${1:-build}")
for exe in model/tlsynth server/tlserve; do
  [ -x "$BUILD/$exe" ] || { echo "load_health: $BUILD/$exe is not built" >&2; exit 1; }
done
TL_BUILD_DIR=$BUILD exec python3 -B tests/integration/test_load_background.py --bench --keys "$KEYS"
