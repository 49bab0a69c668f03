#!/usr/bin/env bash
# test_autostop.sh — tltrain's early stopping (model/tltrain_fit.c), on tlsynth data where one
# epoch is clearly too few (FM, 10 fields x 10 values, 20k samples: the test logloss falls
# for about 20 epochs):
#   - auto-stop (the default) chooses an epoch E > 1, prints "best epoch E of M" with
#     M = E + patience (or the maximum), then trains a fresh model on ALL the lines for E
#     epochs (its epoch lines count every row; the search's count train + validation = all),
#     and --json reports E; the result beats --no-auto-stop --epochs 1, which reports 1;
#   - the held-out slice is chosen by a hash of each line: the same for shuffled lines, and
#     for the file with a UTF-8 byte-order mark before its first line;
#   - --patience 1 stops one epoch after the best; --epochs 3 caps the search at 3;
#   - --validation FILE: the search runs on all the training lines (no hold-out); its clicks
#     and non-clicks are counted (the few-clicks note names the true counts, and only then);
#   - a file too small to hold out 100 clicks trains the fixed default epochs, saying so;
#   - errors: --patience 0 / 1001 / x, --validation unparsable or empty (exit 2, named),
#     missing (exit 1), auto-stop options with --no-auto-stop (exit 2), a bad training line
#     named in the user's file (exit 1), an empty --train or --test or one whose every line
#     --skip-bad drops (exit 2, "holds no samples"), a FIFO, a device or a directory as a
#     data file (exit 2 at once, not a hang), a --name a snapshot cannot carry or an
#     --export that is a file, holds a snapshot or lacks its parent (exit 2 before any epoch);
#     --version / --seed / --dim / --fields out of range once wrapped or cut (exit 2).
# Runs in a few seconds (RelWithDebInfo); the data lives in a mktemp -d removed on exit.
#
#   test_autostop.sh TLSYNTH TLTRAIN
set -u
synth=${1:?usage: test_autostop.sh TLSYNTH TLTRAIN}
train=${2:?usage: test_autostop.sh TLSYNTH TLTRAIN}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_autostop.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok:   $1"; }
bad() { echo "FAIL: $1"; fail=1; }
json_field() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1"; }

"$synth" --model fm --samples 20000 --out "$tmp/tr.ffm" --test-samples 5000 \
  --test-out "$tmp/te.ffm" --fields 10 --values 10 --zipf 0 --seed 5 2>/dev/null ||
  { bad "tlsynth"; exit 1; }
run() { # run NAME ARGS...: stdout in $tmp/NAME.out, stderr in $tmp/NAME.err, exit code echoed
  local name=$1; shift
  "$train" --format libffm "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo $?
}

# --- auto-stop chooses, then retrains on everything ------------------------------
rc=$(run auto --train "$tmp/tr.ffm" --test "$tmp/te.ffm" --model fm --json)
[ "$rc" = 0 ] || bad "auto-stop run: exit $rc: $(tail -3 "$tmp/auto.err")"
auto_json=$(tail -n 1 "$tmp/auto.out")
E=$(json_field "$auto_json" epochs)
line=$(grep -o 'auto-stop: best epoch [0-9]* of [0-9]*' "$tmp/auto.err")
best=$(awk '{print $4}' <<<"$line"); M=$(awk '{print $6}' <<<"$line")
if [ -n "$E" ] && [ "$E" -gt 1 ] && [ "$E" = "$best" ]; then
  ok "auto-stop chose epoch $E > 1 ($line), --json says $E"
else
  bad "auto-stop: json epochs '$E', stderr '$line'"
fi
[ -n "$M" ] && [ "$M" = $((best + 2)) ] && ok "stopped at $M = best + patience 2" ||
  bad "stopped at '$M' for best '$best' (patience 2)"
search=$(grep -c '^auto-stop epoch' "$tmp/auto.out")
[ "$search" = "$M" ] && ok "$M search epoch lines" || bad "$search search lines for M=$M"
final=$(grep -c '^epoch ' "$tmp/auto.out")
[ "$final" = "$E" ] && ok "the final model trained $E epochs" || bad "$final final epochs, want $E"
all=$(grep -c . "$tmp/tr.ffm")
read -r trows vrows < <(awk '/^auto-stop epoch 1:/ {print $6, $13}' "$tmp/auto.out")
frows=$(awk '/^epoch 1:/ {print $5}' "$tmp/auto.out")
if [ "$frows" = "$all" ] && [ "$((trows + vrows))" = "$all" ] && [ "$vrows" -gt $((all / 20)) ] &&
   [ "$vrows" -lt $((all / 6)) ]; then
  ok "search on $trows + validation $vrows rows; the final model on all $all"
else
  bad "rows: search $trows + validation $vrows, final $frows, file $all"
fi
grep -q "training a fresh model on all of" "$tmp/auto.err" && ok "retrain announced" ||
  bad "no retrain message"

# --threads 2 (the file parsed into memory once per reader): the search trains on its part,
# the final model on all the lines
rc=$(run thr --train "$tmp/tr.ffm" --model fm --threads 2 --epochs 4)
trows=$(awk '/^auto-stop epoch 1:/ {print $6}' "$tmp/thr.out")
frows=$(awk '/^epoch 1:/ {print $5}' "$tmp/thr.out")
[ "$rc" = 0 ] && [ -n "$trows" ] && [ "$trows" -lt "$all" ] && [ "$frows" = "$all" ] &&
  ok "--threads 2: search on $trows rows, the final model on all $all" ||
  bad "--threads 2: exit $rc, search rows '$trows', final rows '$frows' (file $all)"

rc=$(run one --train "$tmp/tr.ffm" --test "$tmp/te.ffm" --model fm --json --no-auto-stop --epochs 1)
one_json=$(tail -n 1 "$tmp/one.out")
[ "$rc" = 0 ] && [ "$(json_field "$one_json" epochs)" = 1 ] && ! grep -q auto-stop "$tmp/one.out" &&
  ok "--no-auto-stop --epochs 1: one epoch, no search" || bad "--no-auto-stop --epochs 1: $rc $one_json"
a=$(json_field "$auto_json" logloss); o=$(json_field "$one_json" logloss)
awk "BEGIN { exit !($a + 0.01 < $o) }" && ok "auto-stop test logloss $a < one epoch's $o - 0.01" ||
  bad "auto-stop test logloss $a, one epoch $o"

# --- the slice is chosen by the line, not its position ---------------------------
awk 'BEGIN { srand(3) } { print rand() "\t" $0 }' "$tmp/tr.ffm" | sort -k1,1 | cut -f2- \
  >"$tmp/shuf.ffm"
rc=$(run shuf --train "$tmp/shuf.ffm" --model lr --epochs 2)
h1=$(grep -o '[0-9]* of [0-9]* lines.*' "$tmp/auto.err"); h2=$(grep -o '[0-9]* of [0-9]* lines.*' "$tmp/shuf.err")
h1=${h1//tr.ffm/X}; h2=${h2//shuf.ffm/X}
[ "$rc" = 0 ] && [ -n "$h1" ] && [ "$h1" = "$h2" ] && ok "shuffled lines, same slice: $h1" ||
  bad "shuffled: '$h1' vs '$h2' (exit $rc)"

# --- a UTF-8 byte-order mark before the first line: dropped, the same slice -------
{ printf '\xef\xbb\xbf'; cat "$tmp/tr.ffm"; } >"$tmp/bom.ffm"
rc=$(run bom --train "$tmp/bom.ffm" --model lr --epochs 2)
h3=$(grep -o '[0-9]* of [0-9]* lines.*' "$tmp/bom.err"); h3=${h3//bom.ffm/X}
[ "$rc" = 0 ] && [ -n "$h1" ] && [ "$h1" = "$h3" ] && ok "a UTF-8 BOM: dropped, same slice: $h3" ||
  bad "a UTF-8 BOM: exit $rc, '$h3' vs '$h1': $(tail -2 "$tmp/bom.err")"

# --- patience, maximum, --validation ---------------------------------------------
rc=$(run p1 --train "$tmp/tr.ffm" --model fm --patience 1)
l=$(grep -o 'best epoch [0-9]* of [0-9]*' "$tmp/p1.err")
[ "$rc" = 0 ] && [ "$(awk '{print $5}' <<<"$l")" = $(($(awk '{print $3}' <<<"$l") + 1)) ] &&
  ok "--patience 1: $l" || bad "--patience 1: exit $rc, '$l'"
rc=$(run max3 --train "$tmp/tr.ffm" --model fm --epochs 3 --json)
l=$(grep -o 'best epoch [0-9]* of [0-9]*' "$tmp/max3.err")
[ "$rc" = 0 ] && [ "$(grep -c '^auto-stop epoch' "$tmp/max3.out")" = 3 ] &&
  grep -q "maximum was reached" "$tmp/max3.err" && ok "--epochs 3 caps the search: $l" ||
  bad "--epochs 3: exit $rc, $(grep -c '^auto-stop epoch' "$tmp/max3.out") search epochs, '$l'"
rc=$(run val --train "$tmp/tr.ffm" --validation "$tmp/te.ffm" --model fm --json)
l=$(grep -o 'best epoch [0-9]* of [0-9]*' "$tmp/val.err")
vr=$(awk '/^auto-stop epoch 1:/ {print $6 "+" $13}' "$tmp/val.out")
ve=$(json_field "$(tail -n 1 "$tmp/val.out")" epochs)
if [ "$rc" = 0 ] && [ "$vr" = "$all+5000" ] && [ -n "$ve" ] && [ "$ve" = "$(awk '{print $3}' <<<"$l")" ] &&
   ! grep -q "held out" "$tmp/val.err"; then
  ok "--validation: search on all $all lines, scored on 5000; $l, kept $ve"
else
  bad "--validation: exit $rc, rows $vr, '$l', epochs $ve"
fi

# a --validation file's classes are counted (a note only when one has fewer than 100)
if [ "$rc" = 0 ] && ! grep -q "note:" "$tmp/val.err"; then
  ok "--validation with 5000 lines: no few-clicks note"
else
  bad "--validation: a note on a 5000-line file: $(grep note: "$tmp/val.err")"
fi
head -n 50 "$tmp/te.ffm" >"$tmp/val50.ffm"
c50=$(awk '$1 == 1' "$tmp/val50.ffm" | wc -l)
rc=$(run val50 --train "$tmp/tr.ffm" --validation "$tmp/val50.ffm" --model lr --epochs 2)
[ "$rc" = 0 ] && grep -q "val50.ffm holds $c50 clicks and $((50 - c50)) non-clicks" "$tmp/val50.err" &&
  ok "--validation with 50 lines: the note counts $c50 clicks" ||
  bad "--validation 50 lines: exit $rc, want $c50 clicks: $(grep note: "$tmp/val50.err")"

# --- a file too small for a slice: fixed epochs ----------------------------------
head -n 300 "$tmp/tr.ffm" >"$tmp/small.ffm"
rc=$(run small --train "$tmp/small.ffm" --model lr --json)
[ "$rc" = 0 ] && grep -q "auto-stop: off" "$tmp/small.err" &&
  [ "$(json_field "$(tail -n 1 "$tmp/small.out")" epochs)" = 3 ] &&
  ok "300 lines: auto-stop off, the fixed 3 epochs" || bad "small file: exit $rc, $(cat "$tmp/small.err")"

# --- errors ----------------------------------------------------------------------
for p in 0 1001 x 2.5; do
  rc=$(run err --train "$tmp/small.ffm" --model lr --patience "$p")
  [ "$rc" = 2 ] && grep -q -- "--patience" "$tmp/err.err" && ok "--patience $p: exit 2" ||
    bad "--patience $p: exit $rc: $(cat "$tmp/err.err")"
done
printf '1 0:1:1\n0 0:2:1\nnot a sample\n' >"$tmp/badval.ffm"
rc=$(run err --train "$tmp/small.ffm" --model lr --validation "$tmp/badval.ffm")
[ "$rc" = 2 ] && grep -q "badval.ffm" "$tmp/err.err" && grep -q "3" "$tmp/err.err" &&
  ok "unparsable --validation: exit 2 ($(head -c 100 "$tmp/err.err"))" ||
  bad "unparsable --validation: exit $rc: $(cat "$tmp/err.err")"
: >"$tmp/empty.ffm"
rc=$(run err --train "$tmp/small.ffm" --model lr --validation "$tmp/empty.ffm")
[ "$rc" = 2 ] && grep -q "no samples" "$tmp/err.err" && ok "empty --validation: exit 2" ||
  bad "empty --validation: exit $rc: $(cat "$tmp/err.err")"
rc=$(run err --train "$tmp/small.ffm" --model lr --validation "$tmp/nope.ffm")
[ "$rc" = 1 ] && grep -q "nope.ffm" "$tmp/err.err" && ok "missing --validation: exit 1, named" ||
  bad "missing --validation: exit $rc: $(cat "$tmp/err.err")"
for o in "--patience 2" "--validation $tmp/te.ffm"; do
  # shellcheck disable=SC2086
  rc=$(run err --train "$tmp/small.ffm" --model lr --no-auto-stop $o)
  [ "$rc" = 2 ] && grep -q -- "--no-auto-stop" "$tmp/err.err" && ok "--no-auto-stop $o: exit 2" ||
    bad "--no-auto-stop $o: exit $rc: $(cat "$tmp/err.err")"
done
{ head -n 1000 "$tmp/tr.ffm"; echo "1 0:zz:1"; } >"$tmp/badtrain.ffm"
rc=$(run err --train "$tmp/badtrain.ffm" --model lr)
[ "$rc" = 1 ] && grep -q "badtrain.ffm" "$tmp/err.err" && grep -q "1001" "$tmp/err.err" &&
  ! grep -q "/proc/" "$tmp/err.err" && ok "a bad training line: exit 1, named in the user's file" ||
  bad "bad training line: exit $rc: $(cat "$tmp/err.err")"
# a file without samples, or one that cannot be read twice: exit 2, named, no hang
: >"$tmp/empty.ffm"
for o in "" "--no-auto-stop"; do
  # shellcheck disable=SC2086
  rc=$(run err --train "$tmp/empty.ffm" --model lr $o)
  [ "$rc" = 2 ] && grep -q -- "--train .*empty.ffm holds no samples" "$tmp/err.err" &&
    ok "empty --train $o: exit 2, named" || bad "empty --train $o: exit $rc: $(cat "$tmp/err.err")"
done
printf '1 0:1:nan\n0 0:zz:1\n' >"$tmp/allbad.ffm"
rc=$(run err --train "$tmp/allbad.ffm" --model lr --skip-bad --no-auto-stop)
[ "$rc" = 2 ] && grep -q "holds no samples (2 malformed lines skipped" "$tmp/err.err" &&
  ok "--skip-bad, every line bad: exit 2" || bad "every line bad: exit $rc: $(cat "$tmp/err.err")"
# --test is read through before any epoch: empty or malformed, named before training
rc=$(run err --train "$tmp/small.ffm" --model lr --test "$tmp/empty.ffm")
[ "$rc" = 2 ] && grep -q -- "--test .*empty.ffm holds no samples" "$tmp/err.err" &&
  ! grep -q "epoch" "$tmp/err.out" &&
  ok "empty --test: exit 2, named before training" || bad "empty --test: exit $rc: $(cat "$tmp/err.err")"
{ head -n 50 "$tmp/small.ffm"; echo "1 0:zz:1"; } >"$tmp/badtest.ffm"
rc=$(run err --train "$tmp/small.ffm" --model lr --test "$tmp/badtest.ffm")
[ "$rc" = 1 ] && grep -q -- "--test: .*badtest.ffm:51" "$tmp/err.err" && ! grep -q "epoch" "$tmp/err.out" &&
  ok "a bad --test line: exit 1, named before training" ||
  bad "bad --test line: exit $rc: $(cat "$tmp/err.err")"
mkfifo "$tmp/fifo.ffm"
for o in "--train $tmp/fifo.ffm" "--train $tmp/small.ffm --test $tmp/fifo.ffm" \
         "--train /dev/null" "--train $tmp/small.ffm --validation $tmp"; do
  # shellcheck disable=SC2086
  timeout 10 "$train" --format libffm --model lr $o >"$tmp/err.out" 2>"$tmp/err.err"
  rc=$?
  [ "$rc" = 2 ] && grep -q "a pipe or FIFO\|a character device\|a directory" "$tmp/err.err" &&
    ok "${o##*/}: exit 2 ($(head -c 60 "$tmp/err.err")...)" ||
    bad "$o: exit $rc (124: hung): $(cat "$tmp/err.err")"
done
# a --name no snapshot may carry: refused before training, not after it at the export
for n in "my model" ".." "$(printf 'n%.0s' {1..64})"; do
  rc=$(run err --train "$tmp/small.ffm" --model lr --name "$n" --export "$tmp/named")
  [ "$rc" = 2 ] && grep -q -- "--name" "$tmp/err.err" && ! grep -q "epoch" "$tmp/err.out" &&
    [ ! -e "$tmp/named" ] && ok "--name '${n:0:12}': exit 2 before training" ||
    bad "--name '$n': exit $rc: $(tail -2 "$tmp/err.err")"
done
# an --export the write would refuse after training: refused before any epoch
: >"$tmp/afile"
mkdir -p "$tmp/held"; : >"$tmp/held/MANIFEST"
for e in "$tmp/afile" "$tmp/held" "$tmp/no/such/dir"; do
  rc=$(run err --train "$tmp/small.ffm" --model lr --export "$e")
  [ "$rc" = 2 ] && grep -q -- "--export" "$tmp/err.err" && ! grep -q "epoch" "$tmp/err.out" &&
    ok "--export ${e#"$tmp"/}: exit 2 before training" ||
    bad "--export $e: exit $rc: $(tail -2 "$tmp/err.err")"
done
# numbers strtoull would wrap or clamp ("-1" is 2^64-1) and strtoul cut to 32 bits
for o in "--version -1" "--version 18446744073709551616" "--seed -1" "--dim 4294967297" \
         "--fields -4294967295"; do
  # shellcheck disable=SC2086
  rc=$(run err --train "$tmp/small.ffm" --model dnn $o)
  [ "$rc" = 2 ] && grep -q -- "${o%% *}: .* is not a number in" "$tmp/err.err" &&
    ok "$o: exit 2" || bad "$o: exit $rc: $(tail -1 "$tmp/err.err")"
done
# an option of another kind would be ignored without a word: refused before training
for o in "lr --k 8" "lr --dim 8" "fm --hidden 8" "dnn --norm" "lr --fields 3"; do
  # shellcheck disable=SC2086
  rc=$(run err --train "$tmp/small.ffm" --model $o)
  [ "$rc" = 2 ] && grep -q -- "does not apply to --model ${o%% *}" "$tmp/err.err" &&
    ! grep -q "epoch" "$tmp/err.out" && ok "--model $o: exit 2" ||
    bad "--model $o: exit $rc: $(tail -1 "$tmp/err.err")"
done
exit $fail
