#!/usr/bin/env bash
# Grouping accuracy and throughput of the template miner (`faultline templates --all-lines`).
#
# Usage: scripts/template-accuracy.sh DATA_DIR [SIZE_MB] [RUNS]
#
# DATA_DIR holds loghub-2.0's corrected 2k ground truth, `*_structured_corrected.csv` (for
# example a checkout of https://github.com/logpai/loghub-2.0, whose 2k_dataset/ has them; the
# data is not part of this repository). For each file, its Content column is fed in file order
# through `faultline templates --all-lines --format json` (one fresh miner per dataset, default
# parameters) and grouping accuracy is computed as loghub-2.0's evaluator does: a line counts as
# correct when its predicted group (every line with the same final template id) is exactly its
# ground-truth group (every line with the same EventId). The table shows Drain's published
# numbers beside ours (loghub-2.0 RQs_experiments/RQ2/effectiveness_results.csv, column Drain,
# Loghub-2k value).
#
# Throughput: $LOGHUB_DIR/*.log (default ../shared/corpus/loghub, raw loghub 2k logs with their
# headers; the Content columns of DATA_DIR when absent) repeated to SIZE_MB (default 128) MB,
# mined by `taskset -c 0 faultline templates --all-lines --format json` (output to /dev/null),
# best of RUNS (default 3) runs: lines per second by wall clock and per CPU second.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: scripts/template-accuracy.sh DATA_DIR [SIZE_MB] [RUNS]}
size_mb=${2:-128}
runs=${3:-3}
loghub=${LOGHUB_DIR:-../shared/corpus/loghub}
work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
bin=${FAULTLINE_BIN:-target/release/faultline}
if [ -z "${FAULTLINE_BIN:-}" ]; then
  cargo build --release --locked --quiet
fi

python3 - "$bin" "$data" "$work" "$loghub" "$size_mb" "$runs" <<'PY'
import csv, glob, json, os, resource, subprocess, sys, time

binary, data, work, loghub, size_mb, runs = sys.argv[1:7]
size_mb, runs = int(size_mb), int(runs)

DRAIN = {  # published GA on the corrected 2k labels
    "Apache": 1.000, "BGL": 0.963, "HDFS": 0.998, "HPC": 0.887, "Hadoop": 0.948,
    "HealthApp": 0.780, "Linux": 0.690, "Mac": 0.786, "OpenSSH": 0.789, "OpenStack": 0.733,
    "Proxifier": 0.526, "Spark": 0.922, "Thunderbird": 0.955, "Zookeeper": 0.967,
}

files = sorted(glob.glob(os.path.join(data, "**", "*_structured_corrected.csv"), recursive=True))
if not files:
    sys.exit(f"no *_structured_corrected.csv under {data}")

def grouping_accuracy(truth, predicted):
    """loghub-2.0's get_accuracy: lines whose predicted group equals their true group."""
    by_truth, size_of_pred = {}, {}
    for t, p in zip(truth, predicted):
        by_truth.setdefault(t, []).append(p)
        size_of_pred[p] = size_of_pred.get(p, 0) + 1
    correct = 0
    for preds in by_truth.values():
        if len(set(preds)) == 1 and size_of_pred[preds[0]] == len(preds):
            correct += len(preds)
    return correct / len(truth)

contents = []
print("| System | lines | GT templates | our templates | GA (faultline) | GA (Drain, published) |")
print("|---|---:|---:|---:|---:|---:|")
ours, drains = [], []
for path in files:
    system = os.path.basename(path).split("_")[0]
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    lines = [r["Content"].replace("\r", " ").replace("\n", " ") for r in rows]
    truth = [r["EventId"] for r in rows]
    contents.extend(lines)
    feed = os.path.join(work, system + ".content")
    with open(feed, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = subprocess.run([binary, "templates", "--all-lines", "--format", "json", feed],
                         check=True, capture_output=True, text=True).stdout
    predicted = [None] * len(lines)
    for l in out.splitlines():
        o = json.loads(l)
        predicted[o["line"] - 1] = o["template_id"]
    if None in predicted:
        sys.exit(f"{system}: some lines got no template")
    ga = grouping_accuracy(truth, predicted)
    ours.append(ga)
    drain = DRAIN.get(system)
    if drain is not None:
        drains.append(drain)
    print(f"| {system} | {len(lines)} | {len(set(truth))} | {len(set(predicted))} | {ga:.3f} | "
          + (f"{drain:.3f} |" if drain is not None else "- |"))
mean = sum(ours) / len(ours)
drain_mean = f"**{sum(drains) / len(drains):.3f}**" if len(drains) == len(ours) else "-"
print(f"| **Mean** | | | | **{mean:.3f}** | {drain_mean} |")

# Throughput on one core.
logs = sorted(glob.glob(os.path.join(loghub, "*.log")))
if logs:
    base = b"".join(open(p, "rb").read() for p in logs)
    what = f"{len(logs)} raw loghub logs from {loghub}"
else:
    base = ("\n".join(contents) + "\n").encode()
    what = "the Content columns of the ground truth"
big = os.path.join(work, f"templates-{size_mb}m.log")
with open(big, "wb") as f:
    written = 0
    while written < size_mb << 20:
        f.write(base)
        written += len(base)
n_lines = base.count(b"\n") * (written // len(base))
cmd = ["taskset", "-c", "0", binary, "templates", "--all-lines", "--format", "json", big]
best_wall, best_cpu = None, None
for _ in range(runs):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    best_wall = wall if best_wall is None else min(best_wall, wall)
    best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
print()
print(f"throughput: {' '.join(cmd[:-1])} on {written / 1e6:.0f} MB = {n_lines} lines ({what}), "
      f"best of {runs}:")
print(f"  {n_lines / best_wall / 1e6:.2f} M lines/s wall ({written / best_wall / 1e6:.0f} MB/s, "
      f"{best_wall:.2f} s); {n_lines / best_cpu / 1e6:.2f} M lines per CPU second")
PY
