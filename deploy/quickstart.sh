#!/usr/bin/env bash
# quickstart.sh — from a fresh clone on Debian 12: install the dependencies, build
# tlserve, generate a synthetic 10M-key LR model, inspect and verify it, and run the
# store benchmark. Run as root (or a user with sudo); works from any directory.
#
#   QS_KEYS=100M ./deploy/quickstart.sh     # a bigger model (default 10M)
#   QS_JOBS=4    ./deploy/quickstart.sh     # build parallelism (default: nproc)
#
# The model is written under build/ and removed at exit; the build stays in build/.
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
BENCH=$BUILD/store/store_bench
for bin in "$TLSNAP" "$BENCH"; do
  [ -x "$bin" ] || { echo "quickstart: $bin was not built" >&2; exit 1; }
done

# The model goes in a fresh directory inside the build tree, removed however we exit.
MODEL_TMP=$(mktemp -d "$ROOT/$BUILD/quickstart.XXXXXX")
cleanup() { rm -rf -- "$MODEL_TMP"; }
trap cleanup EXIT
MODEL=$MODEL_TMP/ctr_lr/1

step "generate a synthetic LR model: $KEYS keys (tlsnap gen)"
"$TLSNAP" gen --keys "$KEYS" --out "$MODEL" --kind lr --name ctr_lr --version 1 --seed 42

step "inspect the snapshot (tlsnap info)"
"$TLSNAP" info "$MODEL"

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

step "done"
echo "quickstart: OK in $(($(date +%s) - start)) s; binaries in $ROOT/$BUILD (model dir removed)"
