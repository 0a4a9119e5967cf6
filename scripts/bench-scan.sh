#!/usr/bin/env bash
# Side-by-side throughput of `faultline scan` and `rg -c -f <the same patterns>` on one generated
# corpus, each pinned to one core, best of N runs. Usage: scripts/bench-scan.sh [SIZE_MB] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
size_mb=${1:-500}
runs=${2:-3}
work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
bin=target/release/faultline
cargo build --release --locked --quiet
background=()
[ -d ../shared/corpus/loghub ] && background=(--background ../shared/corpus/loghub)
corpus=$work/corpus-${size_mb}m.log
[ -s "$corpus" ] || $bin bench corpus --size-mb "$size_mb" "${background[@]}" > "$corpus"
$bin bench patterns --unnamed > "$work/patterns.txt"
bytes=$(stat -c %s "$corpus")
cat "$corpus" > /dev/null  # warm the page cache

best() {  # best wall time in seconds over $runs runs of "$@"
  local best=
  for _ in $(seq "$runs"); do
    local t0 t1
    t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N)
    local t; t=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || (( $(echo "$t < $best" | bc -l) )); then best=$t; fi
  done
  echo "$best"
}
fl=$(best taskset -c 0 $bin scan --threads 1 --no-summary --progress never "$corpus")
rg=$(best taskset -c 0 rg -c -f "$work/patterns.txt" "$corpus")
mbps() { echo "scale=1; $bytes / $1 / 1000000" | bc -l; }
echo "corpus: $corpus ($bytes bytes, $(wc -l < "$corpus") lines), $(wc -l < "$work/patterns.txt") patterns"
echo "faultline scan: ${fl}s  $(mbps "$fl") MB/s"
echo "rg -c -f:       ${rg}s  $(mbps "$rg") MB/s"
echo "ratio faultline/rg: $(echo "scale=2; $rg / $fl" | bc -l)x"
