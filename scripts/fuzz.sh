#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer). The targets are fuzz/fuzz_targets/*.rs; their bodies are
# faultline::fuzzing, which `cargo test` also runs over every stored input (fuzz/corpus/<target>/
# and fuzz/regressions/<target>/), so a regression fails CI even where cargo-fuzz is absent.
#
#   scripts/fuzz.sh [SECONDS]   run every target for SECONDS each (default 60), one after the
#                               other, then minimise the corpora; prints execs, coverage, crashes
#   scripts/fuzz.sh --ci        every target for a fixed number of inputs (FUZZ_RUNS, 20000)
#                               from a fixed seed (FUZZ_SEED, 1) when cargo-fuzz is installed,
#                               corpora left as they are; otherwise says so and exits 0 (the
#                               corpus replay in `cargo test` remains). Exit code 1 on a crash,
#                               with the end of the target's log and the input (base64) printed.
#   scripts/fuzz.sh --seed      (re)build the seed corpora from tests/fixtures, examples/, kb/
#   TARGETS="engine redact" scripts/fuzz.sh 600    only some targets
#
# CI (.ci/run) runs --ci after scripts/test.sh. Decision: CI has 90 minutes on 2 cores; the
# test suite takes a few minutes, the fuzz build (release, AddressSanitizer, the whole
# dependency tree) about as long as a cold test build, and 9 targets x 20000 inputs is 3 to 4
# minutes: well within budget, and it runs new inputs on every change instead of only the stored
# ones. The seed and the number of inputs are fixed, not the time, so CI's run does not depend
# on the machine's speed and `scripts/fuzz.sh --ci` here follows nearly the same inputs (not
# exactly: hash maps seed themselves per process, which moves coverage a little). A crash fails CI (exit 1; the log's end and the input are printed, since CI
# keeps no files). The long campaigns, with random seeds, stay manual.
#
# Stable Rust works: RUSTC_BOOTSTRAP=1 lets it take the -Z flags that cargo-fuzz passes.
# FUZZ_TARGET_DIR (default fuzz/target) is the build directory. Exit code 1 when a target
# found a crash: its input is in fuzz/artifacts/<target>/; turn it into a regression
# (fuzz/regressions/<target>/ and a named test in tests/it/fuzz_corpus.rs) and fix it.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS="envelope kb_toml seed_markdown deadends_json engine chunk_reader redact kafka_record multiline"
TARGETS="${TARGETS:-$ALL_TARGETS}"
TARGET_DIR="${FUZZ_TARGET_DIR:-fuzz/target}"

export RUSTC_BOOTSTRAP=1
# Seed file named by content, as libFuzzer names corpus files.
seed() { # target file
  local sum
  sum=$(sha1sum "$2" | cut -c1-40)
  cp "$2" "fuzz/corpus/$1/$sum"
}

seed_corpora() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  for t in $ALL_TARGETS; do mkdir -p "fuzz/corpus/$t"; done
  local n=0
  # Log text: every fixture and example, in pieces of 40 lines (libFuzzer's default input
  # size limit is 4 KiB).
  find tests/fixtures examples -type f \( -name '*.log' -o -name '*.jsonl' -o -name '*.json' \) |
    sort | while read -r f; do
      rm -f "$tmp"/piece.*
      split -l 40 "$f" "$tmp/piece."
      for p in "$tmp"/piece.*; do
        head -c 4000 "$p" > "$tmp/cut"
        seed envelope "$tmp/cut"
        seed engine "$tmp/cut"
        seed redact "$tmp/cut"
        # chunk_reader: 3 bytes of settings (line limit, read size, repeats), then the text.
        { printf '\x03\x05\x02'; cat "$tmp/cut"; } > "$tmp/cr"
        seed chunk_reader "$tmp/cr"
        # kafka_record: flags (job id from the envelope, the key, then a header, in turn),
        # the size limit (4081 bytes), then key 0x1e headers (0x1f apart) 0x1e payload.
        n=$((n + 1))
        { printf "\\x$(printf %02x $(((n % 3) * 4)))\xff"; printf 'job-7\x1ejob=train-3\x1ftrace=abc\x1e'
          cat "$tmp/cut"; } > "$tmp/kr"
        seed kafka_record "$tmp/kr"
      done
    done
  # kafka_record: records over a small limit, tombstones, a missing key, empty headers.
  printf '\x00\x02k\x1e\x1e%s' "$(head -c 200 tests/fixtures/captured/py_keyerror.log)" > "$tmp/kr"
  seed kafka_record "$tmp/kr"
  printf '\x03\x10\x1ename\x1e' > "$tmp/kr"
  seed kafka_record "$tmp/kr"
  printf '\x08\x10key\x1ejob\x1fjob=\x1fjob=x\x1e{"log":"BOOM 1"}\n\n{"level":1}\n' > "$tmp/kr"
  seed kafka_record "$tmp/kr"
  # multiline: 4 bytes of settings (lines cap, bytes cap, streams cap, seconds between lines),
  # then whole failures (tracebacks, c10 frames, torchrun summaries) of the captured logs.
  find tests/fixtures/captured tests/fixtures/secrets -name '*.log' | sort | while read -r f; do
    rm -f "$tmp"/piece.*
    split -l 100 "$f" "$tmp/piece."
    for p in "$tmp"/piece.*; do
      { printf '\x10\x30\x03\x01'; head -c 8000 "$p"; } > "$tmp/ml"
      seed multiline "$tmp/ml"
    done
  done
  find kb -name '*.toml' | sort | while read -r f; do seed kb_toml "$f"; done
  for f in tests/fixtures/seed/*.md kb/README.md; do seed seed_markdown "$f"; done
  for f in tests/fixtures/deadends/*.json tests/fixtures/deadends/*.ndjson; do
    seed deadends_json "$f"
  done
  for t in $ALL_TARGETS; do
    echo "seeded fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) inputs"
  done
}

if [[ "${1:-}" == "--seed" ]]; then
  seed_corpora
  exit 0
fi

SECONDS_EACH="${1:-60}"
MINIMISE=1
CI_ARGS=()
if [[ "$SECONDS_EACH" == "--ci" ]]; then
  MINIMISE=0
  if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: only the corpus replay in cargo test runs (cargo install cargo-fuzz --locked)"
    exit 0
  fi
  SECONDS_EACH=600 # a cap only: the runs are counted (FUZZ_RUNS)
  CI_ARGS=(-seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-20000}")
fi

echo "== cargo fuzz build (release, debug assertions, AddressSanitizer)"
cargo fuzz build --target-dir "$TARGET_DIR"

mkdir -p fuzz/logs
found=0
printf '%-14s %8s %12s %10s %8s %8s %8s %12s\n' target seconds execs execs/s cov ft crashes seed
for t in $TARGETS; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  before=$(ls "fuzz/artifacts/$t" | wc -l)
  log="fuzz/logs/$t.log"
  # Inputs of chunk_reader are repeated up to 32 times by the harness; others stay small.
  status=0
  # In CI, new inputs go to a scratch directory: the stored corpus is only read.
  corpora=()
  if ((!MINIMISE)); then
    corpora=("$(mktemp -d)" "fuzz/corpus/$t")
  fi
  cargo fuzz run "$t" "${corpora[@]}" --target-dir "$TARGET_DIR" -- \
    -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=3072 -max_len=8192 \
    -print_final_stats=1 "${CI_ARGS[@]}" >"$log" 2>&1 || status=$?
  after=$(ls "fuzz/artifacts/$t" | wc -l)
  crashes=$((after - before))
  if ((status != 0 && crashes == 0)); then crashes="rc=$status"; fi
  execs=$(grep -h 'stat::number_of_executed_units' "$log" | awk '{s+=$2} END {print s+0}')
  rate=$(grep -h 'stat::average_exec_per_sec' "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -ohE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -ohE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  took=$(grep -ohE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 | awk '{print $5}')
  seed=$(grep -ohE 'Seed: [0-9]+' "$log" | head -1 | awk '{print $2}')
  printf '%-14s %8s %12s %10s %8s %8s %8s %12s\n' "$t" "${took:-$SECONDS_EACH}" "$execs" "$rate" \
    "${cov:-?}" "${ft:-?}" "$crashes" "${seed:-?}"
  if [[ "$crashes" != 0 ]]; then
    found=1
    # CI keeps nothing but its output: the failure and the input go there.
    {
      echo "== $t: the end of $log"
      grep -v '^#[0-9]' "$log" | tail -n 60
      for a in $(ls -t "fuzz/artifacts/$t" | head -n 3); do
        echo "== $t: fuzz/artifacts/$t/$a (base64; base64 -d > file, then cargo fuzz run $t file)"
        base64 -w 0 "fuzz/artifacts/$t/$a" | head -c 16384
        echo
      done
    } >&2
  fi
done

if ((MINIMISE)); then
  echo "== minimising the corpora (cargo fuzz cmin)"
  for t in $TARGETS; do
    cargo fuzz cmin "$t" --target-dir "$TARGET_DIR" -- -max_len=8192 -rss_limit_mb=3072 \
      >"fuzz/logs/$t.cmin.log" 2>&1 || echo "cmin $t failed: see fuzz/logs/$t.cmin.log"
    echo "fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) inputs, $(du -sk "fuzz/corpus/$t" | cut -f1) KiB"
  done
fi
if ((found)); then
  echo "crashes found: see fuzz/artifacts/ and fuzz/logs/" >&2
  exit 1
fi
