#!/usr/bin/env bash
# quality.sh — the training quality table: tltrain with its defaults (auto-stop included) for
# each model kind on each data set in ../shared/data (train.ffm / test.ffm, libffm), printed as
# a markdown table of test logloss / AUC and the epoch count the final model trained (E).
#
# Usage: model/bench/quality.sh [EXTRA TLTRAIN ARGS...]
#        e.g. model/bench/quality.sh --no-auto-stop   (the fixed default epochs)
# Env:   BUILD=build (a configured build dir; tltrain is built if missing)
#        DATA=../shared/data (relative to the checkout)  SETS="criteo_tiny xlearn_criteo ..."
#        MODELS="lr-ftrl lr-adagrad fm ffm dnn"
# Progress goes to stderr, the table to stdout.  Runs in about a minute (nice'd).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
BUILD=${BUILD:-build}
DATA=${DATA:-../shared/data}
SETS=${SETS:-criteo_tiny xlearn_criteo avazu_rx ipinyou}
MODELS=${MODELS:-lr-ftrl lr-adagrad fm ffm dnn}
TLTRAIN=$BUILD/model/tltrain
[ -x "$TLTRAIN" ] || nice cmake --build "$BUILD" -j2 --target tltrain >&2

args_of() { # a column's tltrain arguments
    case $1 in
    lr-ftrl) echo "--model lr --optimizer ftrl" ;;
    lr-adagrad) echo "--model lr --optimizer adagrad" ;;
    *) echo "--model $1" ;;
    esac
}
field() { sed -n "s/.*\"$2\":\([-0-9.eE+a-z]*\).*/\1/p" <<<"$1"; }

header="| data |"
rule="|---|"
for m in $MODELS; do header="$header $m |"; rule="$rule---|"; done
rows=()
for set in $SETS; do
    row="| $set |"
    for m in $MODELS; do
        echo "quality: $set $m" >&2
        # shellcheck disable=SC2046
        out=$(nice "$TLTRAIN" --train "$DATA/$set/train.ffm" --test "$DATA/$set/test.ffm" \
            --format libffm $(args_of "$m") --json "$@" 2>/dev/null | tail -n 1) || out=""
        ll=$(field "$out" logloss); auc=$(field "$out" auc); ep=$(field "$out" epochs)
        if [ -z "$ll" ]; then
            row="$row failed |"
        else
            row="$row $(printf '%.4f / %.4f (%s)' "$ll" "$auc" "$ep") |"
        fi
    done
    rows+=("$row")
done
echo "test logloss / AUC (E: epochs of the final model); tltrain $*"
echo
echo "$header"
echo "$rule"
printf '%s\n' "${rows[@]}"
