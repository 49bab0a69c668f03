#!/usr/bin/env bash
# test_predict.sh — `tltrain predict` scores through the serving path exactly as the trainer
# evaluated: for each model kind, train on a small planted data set (tlsynth), export, then
# predict the test file from the snapshot; the metrics line must equal the trainer's own
# (same floats: model_score on the export is bit for bit the trainer's prediction), there must
# be one score per sample, every score a probability; --json stays JSON when a metric has no
# value (null); --out naming the --data file is refused; and bad input gets exit 2 / 1 with a
# message naming what was wrong.
#
#   test_predict.sh TLSYNTH TLTRAIN
set -u -o pipefail # a tool's exit status survives the | tail that reads its last line
synth=${1:?usage: test_predict.sh TLSYNTH TLTRAIN}
train=${2:?usage: test_predict.sh TLSYNTH TLTRAIN}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_predict.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok:   $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$synth" --model fm --samples 4000 --out "$tmp/tr.ffm" --test-samples 1000 \
  --test-out "$tmp/te.ffm" --fields 6 --values 50 --seed 3 2>/dev/null || { bad "tlsynth"; exit 1; }

for kind in lr fm ffm dnn; do
  extra=""
  [ "$kind" = dnn ] && extra="--dim 4 --hidden 8"
  # shellcheck disable=SC2086
  want=$("$train" --train "$tmp/tr.ffm" --test "$tmp/te.ffm" --format libffm --model "$kind" \
    $extra --export "$tmp/$kind" --json 2>"$tmp/$kind.train.err" | tail -n 1) ||
    bad "$kind: tltrain exited $?: $(tail -2 "$tmp/$kind.train.err")"
  got=$("$train" predict --model-dir "$tmp/$kind" --data "$tmp/te.ffm" --format libffm \
    --out "$tmp/$kind.scores" --json 2>"$tmp/$kind.predict.err" | tail -n 1) ||
    bad "$kind: tltrain predict exited $?: $(tail -2 "$tmp/$kind.predict.err")"
  # the trainer's line is {"logloss":..,"auc":..,"calibration":..,"epochs":..}; predict has
  # "samples" first and no epochs
  want=$(sed 's/,"epochs":[0-9]*}$/}/' <<<"$want")
  if [ -n "$want" ] && [ "${got#\{\"samples\":1000,}" = "${want#\{}" ]; then
    ok "$kind: predict from the export gives the trainer's metrics ($want)"
  else
    bad "$kind: trainer $want, predict $got"
  fi
  n=$(wc -l <"$tmp/$kind.scores")
  [ "$n" -eq 1000 ] && ok "$kind: 1000 scores" || bad "$kind: $n scores for 1000 samples"
  if awk '!($1 >= 0 && $1 <= 1) { exit 1 }' "$tmp/$kind.scores"; then
    ok "$kind: every score in [0, 1]"
  else
    bad "$kind: a score outside [0, 1]"
  fi
done

"$train" predict --data "$tmp/te.ffm" --format libffm >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--model-dir" "$tmp/err" && ok "missing --model-dir: exit 2" ||
  bad "missing --model-dir: exit $rc: $(cat "$tmp/err")"
"$train" predict --model-dir "$tmp/nope" --data "$tmp/te.ffm" --format libffm >/dev/null \
  2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "nope" "$tmp/err" && ok "missing snapshot: exit 1, named" ||
  bad "missing snapshot: exit $rc: $(cat "$tmp/err")"
printf '1 0:1:1\nthis is not libffm\n' >"$tmp/badline.ffm"
"$train" predict --model-dir "$tmp/lr" --data "$tmp/badline.ffm" --format libffm >/dev/null \
  2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "badline.ffm" "$tmp/err" && grep -q "2" "$tmp/err" &&
  ok "malformed line: exit 1, file and line named ($(head -c 120 "$tmp/err"))" ||
  bad "malformed line: exit $rc: $(cat "$tmp/err")"
# a failed run leaves no --out file; with --skip-bad the scores stay one a sample line (nan)
"$train" predict --model-dir "$tmp/lr" --data "$tmp/badline.ffm" --format libffm \
  --out "$tmp/bad.scores" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && [ ! -e "$tmp/bad.scores" ] && [ -z "$(ls "$tmp" | grep 'bad.scores.tmp')" ] &&
  ok "a failed run leaves no --out file" || bad "a failed run: exit $rc, $(ls "$tmp" | grep bad.scores)"
printf '1 0:1:1\nthis is not libffm\n0 0:2:1\n' >"$tmp/mid.ffm"
"$train" predict --model-dir "$tmp/lr" --data "$tmp/mid.ffm" --format libffm --skip-bad \
  --out "$tmp/mid.scores" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/mid.scores")" = 3 ] && [ "$(sed -n 2p "$tmp/mid.scores")" = nan ] &&
  ok "--skip-bad: 3 lines, nan in the bad line's place" ||
  bad "--skip-bad: exit $rc: $(tr '\n' ' ' <"$tmp/mid.scores" 2>/dev/null) $(cat "$tmp/err")"
# a --out that is not a regular file (a FIFO here; /dev/null alike) is written in place, not
# replaced by a renamed file
mkfifo "$tmp/scores.fifo"
cat "$tmp/scores.fifo" >"$tmp/from.fifo" &
reader=$!
"$train" predict --model-dir "$tmp/lr" --data "$tmp/mid.ffm" --format libffm --skip-bad \
  --out "$tmp/scores.fifo" >/dev/null 2>"$tmp/err"; rc=$?
wait $reader
[ $rc -eq 0 ] && [ -p "$tmp/scores.fifo" ] && [ "$(wc -l <"$tmp/from.fifo")" = 3 ] &&
  ok "--out a FIFO: written through it, still a FIFO" ||
  bad "--out a FIFO: exit $rc, $(ls -l "$tmp/scores.fifo"): $(cat "$tmp/err")"
# --json is JSON: a metric without a value (AUC of one class, anything of no sample) is null
grep '^1 ' "$tmp/te.ffm" | head -n 20 >"$tmp/pos.ffm"
: >"$tmp/empty.ffm"
for f in pos empty; do
  line=$("$train" predict --model-dir "$tmp/lr" --data "$tmp/$f.ffm" --format libffm --json \
    2>"$tmp/$f.err" | tail -n 1) || bad "predict $f: exited $?: $(tail -2 "$tmp/$f.err")"
  if python3 -c 'import json, sys
def no(c): raise ValueError(c)
d = json.loads(sys.argv[1], parse_constant=no)
assert d["auc"] is None, d' "$line" 2>"$tmp/err"; then
    ok "$f.ffm: --json parses, auc null ($line)"
  else
    bad "$f.ffm: --json '$line': $(tail -n 1 "$tmp/err")"
  fi
done
# --out naming the --data file (or a link to it) is refused before it is emptied
cp "$tmp/te.ffm" "$tmp/same.ffm"; ln -s same.ffm "$tmp/link.ffm"
for o in same link; do
  "$train" predict --model-dir "$tmp/lr" --data "$tmp/same.ffm" --format libffm \
    --out "$tmp/$o.ffm" >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "is the --data file" "$tmp/err" && cmp -s "$tmp/te.ffm" "$tmp/same.ffm" &&
    ok "--out $o.ffm = --data: exit 2, the data intact" ||
    bad "--out $o.ffm = --data: exit $rc, $(wc -l <"$tmp/same.ffm") lines left: $(cat "$tmp/err")"
done
exit $fail
