#!/usr/bin/env bash
# plot.sh — draw tlgen's sweep results with gnuplot (Debian: gnuplot-nox).
#
#   loadgen/plot.sh SWEEP_JSON [SPECTRUM_FILE...] OUT_PREFIX
#
# SWEEP_JSON is the output of `tlgen --sweep ... --json` (or of `--search-p99-us ... --json`,
# whose probes are plotted the same way); its last JSON line is read.  SPECTRUM_FILEs are
# HdrHistogram-format spectra (`tlgen --spectrum-dir DIR`: DIR/spectrum-<rate>rps.hgrm).
# Writes
#   OUT_PREFIX-latency.svg/.png    corrected p50, p99, p99.9 against the achieved rate (log y);
#                                  the p99 of runs tlgen judged invalid is circled
#   OUT_PREFIX-spectrum.svg/.png   latency by percentile, one curve per spectrum file, on
#                                  HdrHistogram's 1/(1-percentile) log axis (only with files)
# and prints the paths.  Needs gnuplot and python3 (reads the JSON).  Exit: 0, 1 on an error,
# 2 on usage.
set -euo pipefail

usage() {
  echo "usage: $0 SWEEP_JSON [SPECTRUM_FILE...] OUT_PREFIX" >&2
  exit 2
}
[ $# -ge 2 ] || usage
case "$1" in -h|--help) usage ;; esac
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "plot.sh: python3 not found" >&2; exit 1; }

args=("$@")
json=${args[0]}
out=${args[$#-1]}
spectra=("${args[@]:1:$#-2}")
[ -r "$json" ] || { echo "plot.sh: cannot read $json" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The JSON's runs as rows: offered achieved p50 p99 p99.9 valid(1/0), by offered rate.  Runs
# without a successful response have no latency to plot (and 0 has no logarithm): left out.
python3 - "$json" >"$tmp/runs.dat" <<'EOF'
import json, sys
doc = None
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                pass
if doc is None or not ("sweep" in doc or "probes" in doc):
    sys.exit("plot.sh: %s has no tlgen sweep or search JSON line" % sys.argv[1])
runs = sorted(doc.get("sweep") or doc.get("probes"), key=lambda r: r["offered_rps"])
for r in runs:
    if r["ok"] > 0:
        print("%.3f %.3f %.3f %.3f %.3f %d" % (r["offered_rps"], r["achieved_rps"], r["p50_us"],
              r["p99_us"], r["p999_us"], 1 if r["valid"] else 0))
EOF
[ -s "$tmp/runs.dat" ] || { echo "plot.sh: no run in $json had a successful response" >&2; exit 1; }
mkdir -p "$(dirname -- "$out")"

# gnuplot reports an unwritable output but exits 0 (and plots to stdout): check the file.
render() { # FILE, then the script on stdin
  rm -f -- "$1"
  gnuplot >/dev/null
  [ -s "$1" ] || { echo "plot.sh: gnuplot did not write $1" >&2; exit 1; }
  echo "$1"
}

invalid=""
if awk '$6 == 0 { found = 1 } END { exit !found }' "$tmp/runs.dat"; then
  invalid=', "" using 2:($6 == 0 ? $4 : 1/0) with points pt 6 ps 2.5 lw 2 lc rgb "red" title "invalid run (p99 circled)"'
fi

common='
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set key box opaque
set border lc rgb "#444444"
set rmargin 6
'

for term in svg png; do
  if [ $term = svg ]; then t='svg size 900,560 dynamic font "Sans,12" background rgb "white"'
  else t='pngcairo size 900,560 font "Sans,11" background rgb "white"'; fi
  render "$out-latency.$term" <<EOF
set terminal $t
set output "$out-latency.$term"
$common
set key below horizontal nobox
set bmargin 7
set title "Latency vs throughput (corrected: from the due time)"
set xlabel "achieved rate (requests/s)"
set ylabel "latency (us)"
set logscale y
set format y "10^{%L}"
set xrange [0:*]
plot "$tmp/runs.dat" using 2:3 with linespoints lw 2 pt 7 ps 0.8 title "p50", \
     "" using 2:4 with linespoints lw 2 pt 5 ps 0.8 title "p99", \
     "" using 2:5 with linespoints lw 2 pt 9 ps 0.9 title "p99.9" $invalid
EOF
done

[ ${#spectra[@]} -gt 0 ] || exit 0

# Each spectrum's rows (Value Percentile TotalCount 1/(1-Percentile)), without the header, the
# footer and the 100% line (whose 1/(1-p) is infinite).
plots=()
i=0
for s in "${spectra[@]}"; do
  [ -r "$s" ] || { echo "plot.sh: cannot read $s" >&2; exit 1; }
  awk 'NF == 4 && $1 ~ /^[0-9.]+$/ && $2 < 1 { print $1, $4 }' "$s" >"$tmp/s$i.dat"
  [ -s "$tmp/s$i.dat" ] || { echo "plot.sh: $s has no spectrum rows" >&2; exit 1; }
  name=$(basename "$s")
  name=${name%.hgrm}
  name=${name#spectrum-}
  case "$name" in *rps) name="${name%rps} req/s" ;; esac
  plots+=("\"$tmp/s$i.dat\" using 2:1 with lines lw 2 title \"$name\"")
  i=$((i + 1))
done
plotcmd=$(IFS=,; echo "${plots[*]}")

for term in svg png; do
  if [ $term = svg ]; then t='svg size 900,560 dynamic font "Sans,12" background rgb "white"'
  else t='pngcairo size 900,560 font "Sans,11" background rgb "white"'; fi
  render "$out-spectrum.$term" <<EOF
set terminal $t
set output "$out-spectrum.$term"
$common
set key top left
set title "Latency by percentile distribution (corrected)"
set xlabel "percentile"
set ylabel "latency (us)"
set logscale x
set xrange [1:*]
set yrange [0:*]
set xtics ("0%%" 1, "90%%" 10, "99%%" 100, "99.9%%" 1000, "99.99%%" 10000, "99.999%%" 100000, "99.9999%%" 1000000, "99.99999%%" 10000000)
plot $plotcmd
EOF
done
