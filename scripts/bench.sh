#!/usr/bin/env bash
# Runs every scan comparison side by side on one generated corpus and writes BENCHMARKS.md and
# docs/bench-kb-scaling.svg. Usage: scripts/bench.sh [SIZE_MB] [RUNS]
#
# Each tool is pinned to one core (taskset -c 0) unless stated, best of RUNS. Throughput is bytes
# over CPU time (user + sys), which stays honest on a shared machine; wall times are kept too.
#
# ripgrep reads a prefix of the corpus (BENCH_RG_MB, default 1 MB, divided by the KB's growth
# factor; cut at a line end), once per KB size (BENCH_RG_RUNS, default 1), at the KB sizes of
# BENCH_RG_FACTORS (default "1 2"), with its regex size limit raised to 2 GB (the shipped KB's
# patterns exceed its default 100 MB): with those patterns it reads 0.04 MB/s at the shipped
# KB's size and 0.001 MB/s at five times it (2026-12-03), so the whole corpus at four KB sizes
# would take weeks. Its rows carry their own byte count, and its MB/s are over that prefix.
#
# Then the Kafka comparisons (scripts/bench-kafka.sh, BENCH_KAFKA=0 skips them): `faultline run`
# against `kcat -C -e -q` over the same topic of librdkafka's mock broker, one line per record
# and 20 lines per record (BENCH_KAFKA_MB each, default 1024), and faultline's peak RSS behind a
# 100 MB and a 2 GB backlog (BENCH_RSS_SMALL_MB, BENCH_RSS_BIG_MB).
set -euo pipefail
cd "$(dirname "$0")/.."
size_mb=${1:-300}
runs=${2:-3}
work=${BENCH_DIR:-/tmp/faultline-bench}
mkdir -p "$work" docs
FAULTLINE_EXTRA_PACKAGES="time python3" scripts/setup.sh
cargo build --release --locked --quiet
bin=$PWD/target/release/faultline
background=()
[ -d ../shared/corpus/loghub ] && background=(--background ../shared/corpus/loghub)
corpus=$work/corpus-${size_mb}m.log
[ -s "$corpus" ] || $bin bench corpus --size-mb "$size_mb" --failure-rate 0.001 "${background[@]}" > "$corpus"
bytes=$(stat -c %s "$corpus")
lines=$(wc -l < "$corpus")
cat "$corpus" > /dev/null
rg_mb=${BENCH_RG_MB:-1}

results=$work/results.tsv
: > "$results"
# measure NAME CMD...: best CPU seconds (user+sys) and its wall seconds, over $runs runs (RUNS);
# the row is over the whole corpus unless BYTES is set (the bytes the command read); with
# OUTPUT set, what the command prints is appended to that file (the tool's own figures).
measure() {
  local name=$1; shift
  local bytes=${BYTES:-$bytes} runs=${RUNS:-$runs}
  local best_cpu="" best_wall=""
  for _ in $(seq "$runs"); do
    local out code=0
    # CPU time of that one process from wait4 (microseconds; /usr/bin/time rounds to 10 ms, 2.5%
    # of a scan, and RUSAGE_CHILDREN would also count what the interpreter itself spawned).
    python3 -c '
import os, subprocess, sys, time
t0 = time.monotonic()
out = open(os.environ["OUTPUT"], "a") if os.environ.get("OUTPUT") else subprocess.DEVNULL
p = subprocess.Popen(sys.argv[1:], stdout=out, stderr=out)
_, status, r = os.wait4(p.pid, 0)
wall = time.monotonic() - t0
print(f"{r.ru_utime:.4f} {r.ru_stime:.4f} {wall:.4f}")
sys.exit(os.waitstatus_to_exitcode(status))' "$@" > "$work/time.txt" || code=$?
    # 0, or 1 (ripgrep found nothing): a run; anything else (ripgrep rejecting a pattern, a
    # crash) is not a measurement, and a table built on it would lie.
    if (( code > 1 || code < 0 )); then
      echo "bench: $name failed (exit ${code}): $*" >&2
      exit 1
    fi
    out=$(tail -n 1 "$work/time.txt")
    local cpu wall
    cpu=$(echo "$out" | awk '{print $1 + $2}')
    wall=$(echo "$out" | awk '{print $3}')
    if [ -z "$best_cpu" ] || awk "BEGIN{exit !($cpu < $best_cpu)}"; then best_cpu=$cpu; best_wall=$wall; fi
  done
  printf '%s\t%s\t%s\t%s\n' "$name" "$best_cpu" "$best_wall" "$bytes" | tee -a "$results" >&2
}

pin=(taskset -c 0)
for factor in 1 2 5 10; do
  kbdir=$work/kb-x$factor
  [ -d "$kbdir" ] || $bin bench scale-kb --factor "$factor" --out "$kbdir" 2> /dev/null
  $bin bench patterns --kb "$kbdir" --unnamed > "$work/patterns-x$factor.txt"
  # Compiling, timed once per KB size (BENCH_COMPILE_RUNS; the 10x KB takes minutes): into an
  # empty cache, which the scans below then read warm. `bench raw-hyperscan` prints
  # hs_compile_multi's own time (without loading the KB) into compile-x$factor.txt.
  export FAULTLINE_CACHE_DIR=$work/cache-x$factor
  rm -rf "$FAULTLINE_CACHE_DIR" "$work/compile-x$factor.txt" "$work/raw-x$factor.txt" "$work/raw-whole-x$factor.txt"
  OUTPUT=$work/compile-x$factor.txt RUNS=${BENCH_COMPILE_RUNS:-1} \
    measure "compile x$factor" "$bin" bench raw-hyperscan --kb "$kbdir" /dev/null
  # The scan's database (the KB's patterns and the unknown-line gate's) compiled untimed.
  "$bin" scan --kb "$kbdir" --no-summary /dev/null 2> /dev/null
  measure "faultline-scan x$factor" "${pin[@]}" "$bin" scan --kb "$kbdir" --threads 1 --no-summary --progress never "$corpus"
  if [ "$factor" = 1 ]; then
    measure "faultline-scan-no-unknown x1" "${pin[@]}" "$bin" scan --kb "$kbdir" --threads 1 --no-summary --progress never --no-unknown "$corpus"
  fi
  # The tool's own figures too: the scan's time without start-up and the file's reads.
  OUTPUT=$work/raw-x$factor.txt measure "raw-hyperscan-buffer x$factor" "${pin[@]}" "$bin" bench raw-hyperscan --kb "$kbdir" "$corpus"
  if [[ " ${BENCH_RG_FACTORS:-1 2} " == *" $factor "* ]]; then
    rg_corpus=$work/corpus-${size_mb}m-rg-x$factor.log
    head -c $((rg_mb * 1000000 / factor)) "$corpus" | sed '$d' > "$rg_corpus"
    BYTES=$(stat -c %s "$rg_corpus") RUNS=${BENCH_RG_RUNS:-1} measure "ripgrep x$factor" "${pin[@]}" rg --regex-size-limit 2G -c -f "$work/patterns-x$factor.txt" "$rg_corpus"
  fi
done
export FAULTLINE_CACHE_DIR=$work/cache-x1
measure "raw-hyperscan-line x1" "${pin[@]}" "$bin" bench raw-hyperscan --kb "$work/kb-x1" --mode line "$corpus"
# The database design before required literals (each pattern scanned for itself), to compare.
OUTPUT=$work/raw-whole-x1.txt measure "raw-hyperscan-whole-patterns x1" "${pin[@]}" "$bin" bench raw-hyperscan --kb "$work/kb-x1" --whole-patterns "$corpus"
measure "wc -l" "${pin[@]}" wc -l "$corpus"
export FAULTLINE_CACHE_DIR=$work/cache
"$bin" scan --no-summary /dev/null 2> /dev/null
measure "startup (database cache warm)" "$bin" scan --no-summary /dev/null
FAULTLINE_CACHE_DIR=off measure "startup (no database cache)" "$bin" scan --no-summary /dev/null
cores=$(nproc)
export FAULTLINE_CACHE_DIR=$work/cache-x1
measure "faultline-scan all-cores" "$bin" scan --kb "$work/kb-x1" --threads "$cores" --no-summary --progress never "$corpus"

export FAULTLINE_CACHE_DIR=$work/cache
# Output identical to the line-by-line oracle (matches and unknown-line events: the oracle mines
# every line, so this also holds the unknown-line gate to the filter), over a prefix of the
# corpus (BENCH_ORACLE_MB, default 2 MB): the oracle runs the regex crate's RegexSet of every
# pattern on every line, at ripgrep's speed.
oracle_corpus=$work/corpus-${size_mb}m-oracle.log
head -c $((${BENCH_ORACLE_MB:-2} * 1000000)) "$corpus" | sed '$d' > "$oracle_corpus"
$bin scan --no-summary --no-incidents --threads 1 "$oracle_corpus" > "$work/hyperscan.jsonl"
oracle="identical over the first $(($(stat -c %s "$oracle_corpus") / 1000000)) MB"
if ! $bin bench oracle "$oracle_corpus" --expect "$work/hyperscan.jsonl" 2>> "$work/oracle.err"; then oracle=DIFFERENT; fi

# Incident state: a million distinct jobs through the correlator, peak RSS (JSON line).
$bin bench incidents --jobs 1000000 > "$work/incidents.json"

kafka=$work/kafka.tsv
: > "$kafka"
if [[ ${BENCH_KAFKA:-1} != 0 ]]; then
  cargo build --release --locked --quiet --bins
  kmb=${BENCH_KAFKA_MB:-1024}
  small=${BENCH_RSS_SMALL_MB:-100} big=${BENCH_RSS_BIG_MB:-2048}
  for spec in "run-1-line:$kmb:1" "run-20-lines:$kmb:20" "rss-small:$small:1" "rss-big:$big:1"; do
    IFS=: read -r name mb lpr <<<"$spec"
    BENCH_NO_BUILD=1 BENCH_TSV=$kafka BENCH_NAME=$name BENCH_MB=$mb BENCH_LINES_PER_RECORD=$lpr \
      BENCH_OUT=$work/kafka-$name scripts/bench-kafka.sh >&2
  done
fi

python3 scripts/bench_report.py "$results" "$bytes" "$lines" "$size_mb" "$runs" "$oracle" "$cores" "$kafka" "$work/incidents.json"
