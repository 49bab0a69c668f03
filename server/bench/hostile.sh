#!/usr/bin/env bash
# hostile.sh — what the hostile client mix costs a well-behaved client, in one run on one server:
#   1. tlsynth model: a 20,000-key LR model in a temp dir;
#   2. tlserve with the settings of the hostile integration test, warmed with the mix's largest
#      request on every worker before RSS at start is taken (hostile_peers.py FLAGS:
#      2 workers, --max-input-bytes 4 MiB and --max-output-bytes 8 MiB per worker,
#      --idle-timeout-ms 4000, --send-timeout-ms 2000, --frame-timeout-ms 2000);
#   3. tlgen at a steady rate (default 200 req/s, 4 connections, 50-item requests) for
#      DURATION s without hostile peers, then again with the mix of hostile_peers.py running
#      (64 pipeliners that never read, 3,000 idle sockets, slow-loris, garbage);
#   4. prints one line per phase (p50, p99, errors; CPU seconds per second of tlserve and of the
#      hostile driver), the ratio p99 with / without (the target is at most 1.5), the peak RSS (VmHWM) against RSS at start + the caps, the server's refusal
#      and reap counters, and how long SIGTERM took with the hostile peers connected.
# Figures, not a test: it never fails on timing.  The server and the peers share the host's
# cores, so on a small host the ratio includes the CPU the hostile peers' own requests take.
# Usage: server/bench/hostile.sh [--duration S] [--rate R] [--force-epoll] [--pipeliners N]
#                               [--pipeline-items N] [BUILD_DIR]
# (--pipeliners 0 or a smaller --pipeline-items: which part of the mix costs what)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration|--rate|--pipeliners|--pipeline-items) ARGS+=("$1" "$2"); shift 2 ;;
    --force-epoll) ARGS+=("$1"); shift ;;
    *) break ;;
  esac
done
BUILD=$(readlink -f "${1:-build}")
for exe in model/tlsynth server/tlserve loadgen/tlgen; do
  [ -x "$BUILD/$exe" ] || { echo "hostile: $BUILD/$exe is not built" >&2; exit 1; }
done
TL_BUILD_DIR=$BUILD exec python3 -B server/bench/hostile_peers.py "${ARGS[@]}"
