#!/usr/bin/env bash
# test.sh — the whole test suite, as CI runs it (.ci/run):
#
#   1. install the dependencies (deploy/install-deps.sh)
#   2. build/       normal build (RelWithDebInfo)        -> ctest
#   3. build-asan/  AddressSanitizer + UBSan build        -> ctest
#   4. build-fuzz/  libFuzzer targets (when clang exists) -> run each fuzz_* for a while
#
# Every stage runs even when an earlier one failed, so that one run shows every failure;
# the exit status is non-zero when anything failed, and the last line is a summary.
# Works from any directory.
#
#   TL_FUZZ_SECONDS=10   seconds per fuzz target (0 skips fuzzing)
#   TL_JOBS=N            build parallelism (default: nproc)
#   TL_CTEST_JOBS=2      ctest parallelism
#   TL_FUZZ_JOBS=N       fuzz targets run at once (default: nproc; each uses one core)
#
# Nothing passes by skipping: this script installs and builds every dependency, so it sets
# TL_TESTS_STRICT=1 (a Python test that would skip for a missing program, package or data set
# fails instead; tests/integration/harness.py) and a ctest step fails when ctest skipped a test
# (exit 77). Only a clone without the shared data sets beside it (../shared/data) may skip the
# tests that read them.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin" # nats-server and redis-server live there; a user's PATH lacks it

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
ROOT=$(pwd)
JOBS=${TL_JOBS:-$(nproc)}
CTEST_JOBS=${TL_CTEST_JOBS:-2}
FUZZ_SECONDS=${TL_FUZZ_SECONDS:-10}
FUZZ_JOBS=${TL_FUZZ_JOBS:-$(nproc)}

export TL_TESTS_STRICT=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

results=() # one "outcome name" line per step
failed=0
start=$(date +%s)

header() { printf '\n==== %s ====\n' "$*"; }

# run NAME CMD...: runs one command as a step, records its outcome and returns its
# status. Callers chain steps with && and end the chain with || true, so that a failed
# step stops its own stage but not the script.
run() {
  local name=$1 rc=0 t0
  shift
  header "$name"
  echo "+ $*"
  t0=$(date +%s)
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    results+=("ok      $name ($(($(date +%s) - t0)) s)")
  else
    results+=("FAILED  $name (exit $rc)")
    failed=1
  fi
  return "$rc"
}

# ctest_all DIR: ctest in DIR; fails when a test failed or was skipped.
ctest_all() {
  local log rc=0
  log=$(mktemp "${TMPDIR:-/tmp}/tl-ctest.XXXXXX") || return 1
  ctest --test-dir "$1" --output-on-failure -j"$CTEST_JOBS" 2>&1 | tee "$log" || rc=$?
  if [ "$rc" -eq 0 ] && grep -q '(Skipped)' "$log"; then
    if [ -d "$ROOT/../shared/data" ]; then
      echo "ctest skipped tests (listed above); every dependency is installed here, so a skip is a failure"
      rc=1
    else
      echo "ctest skipped tests (listed above): the shared data sets (../shared/data) are absent"
    fi
  fi
  rm -f -- "$log"
  return "$rc"
}

skip() {
  header "$1"
  echo "skipped: $2"
  results+=("skipped $1 ($2)")
}

# fuzz_one BIN: runs one libFuzzer binary for FUZZ_SECONDS on a scratch copy of its seed
# corpus (tests/fuzz/corpus/<name without fuzz_>), so that the repository's corpus is not
# modified. The log and any crash input land in build-fuzz/artifacts/<name>/. Runs inside
# run(), where set -e does not apply: every status is checked by hand.
fuzz_one() {
  local bin=$1 name corpus work art log rc=0
  name=$(basename "$bin")
  corpus=$ROOT/tests/fuzz/corpus/${name#fuzz_}
  art=$ROOT/build-fuzz/artifacts/$name
  log=$art/fuzz.log
  rm -rf -- "$art" # this run's artifacts only: a failure lists what it wrote, not older runs'
  mkdir -p "$art" || return 1
  work=$(mktemp -d "${TMPDIR:-/tmp}/tl-$name.XXXXXX") || return 1
  if [ -d "$corpus" ]; then
    cp -r "$corpus/." "$work/" || { rm -rf -- "$work"; return 1; }
    echo "$name: seed corpus of $(find "$work" -type f | wc -l) files from ${corpus#"$ROOT"/}"
  else
    echo "$name: no seed corpus at ${corpus#"$ROOT"/}; starting empty"
  fi
  "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" >"$log" 2>&1 || rc=$?
  rm -rf -- "$work"
  if [ "$rc" -eq 0 ]; then
    tail -n 12 "$log"
  else
    tail -n 200 "$log"
    echo "$name: exit $rc; full log in ${log#"$ROOT"/}; artifacts:"
    ls -l "$art" | grep -E 'crash-|leak-|timeout-|oom-|slow-unit-' || echo "  (none written)"
    echo "$name: reproduce with: $bin <artifact>"
  fi
  return "$rc"
}

header "tlserve test suite in $ROOT ($(nproc) cores, build -j$JOBS, ctest -j$CTEST_JOBS)"

header "install dependencies"
./deploy/install-deps.sh

# 1. normal build
run "configure build/" cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
  run "build build/" cmake --build build -j"$JOBS" &&
  run "ctest build/" ctest_all build || true

# 2. sanitizer build (ASan + UBSan)
run "configure build-asan/" cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTL_SANITIZE=ON -DTL_BENCH=OFF &&
  run "build build-asan/" cmake --build build-asan -j"$JOBS" &&
  run "ctest build-asan/" ctest_all build-asan || true

# 3. libFuzzer targets
if [ "$FUZZ_SECONDS" = 0 ]; then
  skip "fuzz" "TL_FUZZ_SECONDS=0"
elif ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  skip "fuzz" "clang not installed"
elif run "configure build-fuzz/" cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTL_FUZZ=ON -DTL_BENCH=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ &&
  run "build build-fuzz/" cmake --build build-fuzz -j"$JOBS"; then
  mapfile -t fuzzers < <(find build-fuzz -path build-fuzz/artifacts -prune -o \
    -type f -name 'fuzz_*' -perm -u+x -print | sort)
  if [ ${#fuzzers[@]} -eq 0 ]; then
    run "find fuzz_* targets in build-fuzz/" false || true
  fi
  # FUZZ_JOBS targets at a time, each into its own output and status file; then each is
  # reported as a step of its own, in order
  fuzz_out=$(mktemp -d "${TMPDIR:-/tmp}/tl-fuzz-out.XXXXXX")
  i=0
  for bin in "${fuzzers[@]}"; do
    name=$(basename "$bin")
    (fuzz_one "$bin" >"$fuzz_out/$name.out" 2>&1 && rc=0 || rc=$?; echo "$rc" >"$fuzz_out/$name.rc") &
    i=$((i + 1))
    if [ $((i % FUZZ_JOBS)) -eq 0 ]; then wait; fi
  done
  wait
  fuzz_report() { cat "$fuzz_out/$1.out"; return "$(cat "$fuzz_out/$1.rc" 2>/dev/null || echo 1)"; }
  for bin in "${fuzzers[@]}"; do
    run "fuzz $(basename "$bin"), ${FUZZ_SECONDS} s budget" fuzz_report "$(basename "$bin")" || true
  done
  rm -rf -- "$fuzz_out"
fi

header "summary"
printf '  %s\n' "${results[@]}"
elapsed=$(($(date +%s) - start))
if [ "$failed" -ne 0 ]; then
  n=$(printf '%s\n' "${results[@]}" | grep -c '^FAILED')
  echo "test.sh: FAIL: $n of ${#results[@]} steps failed (${elapsed} s)"
  exit 1
fi
echo "test.sh: PASS: ${#results[@]} steps ok (${elapsed} s)"
