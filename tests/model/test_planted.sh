#!/usr/bin/env bash
# test_planted.sh — FM training quality against a planted model (tlsynth).
#
#   test_planted.sh TLSYNTH TLTRAIN
#
# 1. tlsynth is deterministic (same seed, same bytes: cmp) and refuses a bad
#    argument with exit 2.
# 2. 500k train / 50k test samples from tlsynth's default planted FM (12 fields
#    x 2,000 Zipf(1.1) values, k = 4, half the margin variance pairwise,
#    CTR 0.2, seed 1); tltrain with its defaults, FM and LR.  Checks:
#      - test CTR within 0.2 +- 0.02 (the bias was solved for --ctr 0.2);
#      - planted <= FM logloss <= 1.25 x planted (a trainer cannot beat the
#        planted model beyond noise; if it does, tlsynth's figure is wrong);
#      - LR logloss >= FM logloss + 0.04 x planted (the data has interactions
#        that LR cannot learn and FM does).
#
# Why 1.25: measured on this data (RelWithDebInfo, tltrain defaults), FM /
# planted was 1.211, 1.227, 1.216, 1.225 on seeds 1-4 with the first FM
# defaults (Adagrad, 1 epoch) and is 1.160 on seed 1 (the one used here) with
# today's (Adagrad, instance normalisation, 10 epochs); LR / planted 1.289,
# 1.295, 1.338, 1.340.  1.25 leaves room for changes of initialisation or
# order that are not regressions, and still fails an FM that learns only its
# linear part (it then scores like LR, >= 1.289).  The gap LR - FM was
# 0.07-0.12 x planted; 0.04 is the floor.  The ratio is far from 1 because
# 500k samples do not pin down the tail ids' factors: on the same model FM
# reaches 1.11 at 1M samples and 1.04 at 4M.
#
# Runs in about 15 s (RelWithDebInfo; with TL_SANITIZE=1 the quality part runs small and
# checks no bound, see below); the data lives in a mktemp -d removed
# on exit.
set -u -o pipefail # a tool's exit status survives the | tail that reads its last line
synth=${1:?usage: test_planted.sh TLSYNTH TLTRAIN}
train=${2:?usage: test_planted.sh TLSYNTH TLTRAIN}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_planted.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

check() { # check DESCRIPTION CONDITION(awk expression)
    if awk "BEGIN { exit !($2) }"; then
        echo "ok:   $1"
    else
        echo "FAIL: $1"
        fail=1
    fi
}

# json_field JSON-LINE KEY -> the number
json_field() {
    sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1"
}

# --- determinism and argument checks -----------------------------------------
"$synth" --model fm --samples 2000 --out "$tmp/a" --test-samples 500 --test-out "$tmp/at" \
    --seed 7 2>/dev/null || { echo "FAIL: tlsynth small run"; exit 1; }
"$synth" --model fm --samples 2000 --out "$tmp/b" --seed 7 2>/dev/null
"$synth" --model fm --samples 2000 --out "$tmp/c" --seed 8 2>/dev/null
if cmp -s "$tmp/a" "$tmp/b"; then
    echo "ok:   same seed, same bytes (and the train file ignores --test-*)"
else
    echo "FAIL: tlsynth --seed 7 twice gave different files"; fail=1
fi
if cmp -s "$tmp/a" "$tmp/c"; then
    echo "FAIL: tlsynth --seed 7 and --seed 8 gave the same file"; fail=1
fi
"$synth" --model fm --samples 2000 --out "$tmp/d" --format libsvm --seed 7 2>/dev/null
if [ "$(head -1 "$tmp/d" | awk '{print NF}')" != 13 ]; then
    echo "FAIL: libsvm line does not hold label + 12 features"; fail=1
fi
"$synth" --model fm --samples 10 --out "$tmp/e" --zipf -1 2>"$tmp/err"
rc=$?
if [ "$rc" = 2 ] && grep -q -- "--zipf" "$tmp/err"; then
    echo "ok:   --zipf -1 refused with exit 2, naming --zipf"
else
    echo "FAIL: --zipf -1 gave exit $rc: $(cat "$tmp/err")"; fail=1
fi
"$synth" --model fm --samples 10 --out "$tmp/nodir/x" 2>/dev/null
rc=$?
[ "$rc" = 1 ] || { echo "FAIL: unwritable --out gave exit $rc, want 1"; fail=1; }

# --- quality ------------------------------------------------------------------
# Under the sanitizers (TL_SANITIZE=1, the build-asan/ ctest) the same runs on a twentieth
# of the data check memory safety only: the bounds below hold at 500k samples, and the
# normal build checks them.
samples=500000 test_samples=50000
[ "${TL_SANITIZE:-0}" = 1 ] && samples=25000 test_samples=2500
synth_json=$("$synth" --model fm --samples $samples --out "$tmp/train.ffm" \
    --test-samples $test_samples --test-out "$tmp/test.ffm" --seed 1 --json | tail -1) ||
    { echo "FAIL: tlsynth"; exit 1; }
# --no-auto-stop: the fixed epochs these bounds were measured with, and a run that fits the
# CI budget (auto-stop's search and retrain took this test from 15 s to 70 s; it is checked in
# test_autostop.sh).
fm_json=$("$train" --train "$tmp/train.ffm" --test "$tmp/test.ffm" --format libffm \
    --model fm --no-auto-stop --json 2>/dev/null | tail -1) || { echo "FAIL: tltrain --model fm"; exit 1; }
lr_json=$("$train" --train "$tmp/train.ffm" --test "$tmp/test.ffm" --format libffm \
    --model lr --no-auto-stop --json 2>/dev/null | tail -1) || { echo "FAIL: tltrain --model lr"; exit 1; }
planted=$(json_field "$synth_json" test_logloss)
ctr=$(json_field "$synth_json" test_ctr)
fm=$(json_field "$fm_json" logloss)
lr=$(json_field "$lr_json" logloss)
echo "planted $planted  fm $fm ($(awk "BEGIN{printf \"%.3f\", $fm/$planted}")x)" \
     " lr $lr ($(awk "BEGIN{printf \"%.3f\", $lr/$planted}")x)  test ctr $ctr"
if [ -z "$planted" ] || [ -z "$ctr" ] || [ -z "$fm" ] || [ -z "$lr" ]; then
    echo "FAIL: missing figures (tlsynth: $synth_json; fm: $fm_json; lr: $lr_json)"
    exit 1
fi
if [ "${TL_SANITIZE:-0}" = 1 ]; then
    check "figures finite under the sanitizers" "$fm > 0 && $lr > 0 && $planted > 0"
    exit $fail
fi
check "test ctr $ctr within 0.2 +- 0.02" "$ctr >= 0.18 && $ctr <= 0.22"
check "fm $fm >= planted $planted" "$fm >= $planted"
check "fm $fm <= 1.25 x planted $planted" "$fm <= 1.25 * $planted"
check "lr $lr >= fm $fm + 0.04 x planted" "$lr >= $fm + 0.04 * $planted"
exit $fail
