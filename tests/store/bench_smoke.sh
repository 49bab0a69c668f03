#!/bin/bash
# bench_smoke.sh BUILD_DIR — the benchmark programs of store/bench and
# model/score_bench run to the end on tiny inputs and print their figures.
# Checks that they work, never how fast: each must exit 0 and print its
# result lines with numbers in them.
set -u
build=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_smoke.XXXXXX") || exit 1
trap 'rm -rf -- "$tmp"' EXIT
fails=0

# expect NAME REGEX CMD...: runs CMD into NAME.out; fails on a non-zero exit or
# when REGEX (grep -E) matches no line of the output.
expect() {
  local name=$1 re=$2 rc=0
  shift 2
  "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $name: exit $rc"; cat "$tmp/$name.out"; fails=$((fails + 1)); return
  fi
  if ! grep -Eq -- "$re" "$tmp/$name.out"; then
    echo "FAIL $name: no line matches /$re/"; cat "$tmp/$name.out"; fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(grep -E -- "$re" "$tmp/$name.out" | head -n 1)"
}

expect limit_sweep 'limit_reads_per_s over +2 MiB: [1-9][0-9]*$' "$build/store/limit_sweep" 1 2
expect limit_sweep_bad_size "is not a size" bash -c "! '$build/store/limit_sweep' 0x"
expect layout_bench 'FM k=16 fused, 40300 ids .* p99 [0-9]+' \
  "$build/store/layout_bench" --keys 100k --load 0.5 --requests 20
expect layout_bench_bad_load "--load: a fraction" bash -c "! '$build/store/layout_bench' --load 2"
expect tlsynth_model 'total +20000 keys' \
  "$build/model/tlsynth" model --keys 20k --out "$tmp/fm" --kind fm --value-floats 17
expect score_bench 'lookup alone p50 is [0-9.]+x it' \
  "$build/model/score_bench" --model "$tmp/fm" --key-space 20000 --requests 20 --items 20 --per-item 20
expect score_bench_hot 'hot \(ids from 2048 keys, in cache\): model_score us p50 [0-9]+' \
  cat "$tmp/score_bench.out"

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "bench_smoke: all checks passed"
