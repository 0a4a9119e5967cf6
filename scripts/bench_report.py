#!/usr/bin/env python3
"""Turns scripts/bench.sh's results.tsv into BENCHMARKS.md and docs/bench-kb-scaling.svg.

Standard library only. Throughput = the bytes a run read / CPU seconds (user + sys) of its best run.

It refuses (exit 1, nothing written) when a goal's measurement is missing from the results: a
table of goals must not read as met, or as not measured, by omission.
"""
import os
import re
import platform
import subprocess
import sys
from datetime import date


def main() -> None:
    results_path, size, lines, size_mb, runs, oracle, cores = sys.argv[1:8]
    kafka_path = sys.argv[8] if len(sys.argv) > 8 else ""
    incidents_path = sys.argv[9] if len(sys.argv) > 9 else ""
    incidents = None
    if incidents_path and os.path.exists(incidents_path):
        import json
        incidents = json.loads(open(incidents_path, encoding="utf-8").read())
    kafka = {}
    if kafka_path and os.path.exists(kafka_path):
        for line in open(kafka_path, encoding="utf-8"):
            name, b, r, k, f, ss, peak, lpr, sr, parts, rounds = line.rstrip("\n").split("\t")
            kafka[name] = dict(bytes=int(b), records=int(r), kcat=float(k), fl=float(f),
                               steady=float(ss), peak_kb=int(peak), lpr=int(lpr),
                               steady_records=int(sr), parts=int(parts), runs=int(rounds))
    size, lines = int(size), int(lines)
    rows = {}
    for line in open(results_path, encoding="utf-8"):
        fields = line.rstrip("\n").split("\t")
        name, cpu, wall = fields[:3]
        read = int(fields[3]) if len(fields) > 3 else size
        rows[name] = (float(cpu), float(wall), read)

    needed = ["faultline-scan x1", "faultline-scan-no-unknown x1", "raw-hyperscan-buffer x1",
              "ripgrep x1", "compile x1", "compile x10", "faultline-scan x10",
              "startup (no database cache)", "startup (database cache warm)", "wc -l",
              "raw-hyperscan-line x1", "faultline-scan all-cores"]
    missing = [n for n in needed if n not in rows]
    missing += [f"kafka {n}" for n in ("run-1-line", "run-20-lines", "rss-small", "rss-big")
                if n not in kafka]
    if incidents is None:
        missing.append("bench incidents")
    if missing:
        sys.exit("bench_report: not writing BENCHMARKS.md: these goals were not measured: "
                 + ", ".join(missing))

    def mbps(name: str) -> float:
        cpu, _, read = rows[name]
        return read / cpu / 1e6 if cpu > 0 else float("inf")

    def wall_mbps(name: str) -> float:
        _, wall, read = rows[name]
        return read / wall / 1e6 if wall > 0 else float("inf")

    cpu_model = "unknown"
    try:
        for l in open("/proc/cpuinfo", encoding="utf-8"):
            if l.startswith("model name"):
                cpu_model = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    hs_version = subprocess.run(["sh", "-c", "pkg-config --modversion libhs 2>/dev/null"],
                                capture_output=True, text=True).stdout.strip() or "?"
    rg_version = subprocess.run(["sh", "-c", "rg --version | head -1"],
                                capture_output=True, text=True).stdout.strip()

    work = os.path.dirname(results_path)

    def tool_best(name: str, pattern: str, best=max):
        """The best figure a tool printed itself over the runs (bench.sh keeps its output)."""
        path = os.path.join(work, name)
        if not os.path.exists(path):
            return None
        found = [float(m) for m in re.findall(pattern, open(path, encoding="utf-8").read())]
        return best(found) if found else None

    fl = mbps("faultline-scan x1")
    fl_known = mbps("faultline-scan-no-unknown x1")
    hs_proc = mbps("raw-hyperscan-buffer x1")
    rg = mbps("ripgrep x1")
    rg_read = rows["ripgrep x1"][2]
    # Raw Hyperscan: the scan's own time (bench raw-hyperscan times the file's reads apart);
    # the process CPU (start, KB load, reads) when the tool's output is missing.
    hs = tool_best("raw-x1.txt", r"scan [0-9.]+ s, ([0-9.]+) MB/s") or mbps("raw-hyperscan-buffer x1")
    hs_line = mbps("raw-hyperscan-line x1")
    hs_whole = tool_best("raw-whole-x1.txt", r"scan [0-9.]+ s, ([0-9.]+) MB/s")
    wc = mbps("wc -l")
    fl10 = mbps("faultline-scan x10")
    allcores = wall_mbps("faultline-scan all-cores")
    out = []
    out.append("# Benchmarks\n")
    commit = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "kb",
                            "Cargo.toml", "Cargo.lock"], capture_output=True, text=True).stdout.strip()
    measured = f"commit {commit}" + (" with uncommitted changes to src or kb" if dirty else "")
    settings = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ)
                        if k.startswith("BENCH_") and k not in ("BENCH_NO_BUILD", "BENCH_DIR"))
    out.append(f"Generated by `{settings + ' ' if settings else ''}scripts/bench.sh {size_mb} {runs}` on "
               f"{date.today().isoformat()}, measuring {measured}. Reproduce with that one command (it "
               "builds, generates the corpus and writes this file).\n")
    out.append("## Machine and inputs\n")
    out.append(f"- CPU: {cpu_model}, {cores} cores ({platform.machine()}); kernel {platform.release()}")
    out.append(f"- Hyperscan (libhs) {hs_version}; {rg_version}")
    out.append(f"- Corpus: {size / 1e6:.0f} MB, {lines} lines: the public loghub samples and synthetic "
               "training-job output, with 0.1% KB example lines (`faultline bench corpus`)")
    out.append("- Each tool pinned to one core (`taskset -c 0`) unless stated; best of "
               f"{runs} runs; throughput = bytes / CPU time (user + sys).\n")
    out.append("## Targets\n")
    out.append("| target | measured | ratio | goal | met |")
    out.append("|---|---|---|---|---|")

    def row(what, measured, ratio, goal, ok):
        out.append(f"| {what} | {measured} | {ratio} | {goal} | {'yes' if ok else 'NO'} |")

    # Issue 29's goals. Each ratio compares two processes over the same corpus on one core: each
    # starts, loads the KB and its compiled database, reads the file and scans it.
    row("`faultline scan` (defaults: incidents, unknown-line mining) vs raw Hyperscan, whole "
        "buffers (`faultline bench raw-hyperscan`, the same process work but the scan)",
        f"{fl:.0f} vs {hs_proc:.0f} MB/s", f"{fl / hs_proc:.2f}x", ">= 0.8x", fl / hs_proc >= 0.8)
    row("`faultline scan --no-unknown` vs raw Hyperscan, whole buffers",
        f"{fl_known:.0f} vs {hs_proc:.0f} MB/s", f"{fl_known / hs_proc:.2f}x", ">= 0.9x",
        fl_known / hs_proc >= 0.9)
    row("raw Hyperscan, whole KB (its patterns' required literals, as `scan` compiles it), whole "
        "buffers, one core (the scan's own time, without start-up and the file's reads)",
        f"{hs:.0f} MB/s", "", ">= 1500 MB/s", hs >= 1500)
    row(f"`faultline scan` vs `rg -c -f <same patterns>` (ripgrep over the first "
        f"{rg_read / 1e6:.0f} MB)", f"{fl:.0f} vs {rg:.1f} MB/s", f"{fl / rg:.0f}x", ">= 3x",
        fl / rg >= 3)
    row("output identical to the line-by-line oracle", oracle, "", "identical",
        oracle.startswith("identical"))
    # hs_compile_multi's own time (after loading the KB), else the process's wall time.
    ready = r"ready in ([0-9.]+) s"
    c1 = tool_best("compile-x1.txt", ready, min) or rows["compile x1"][1]
    c10 = tool_best("compile-x10.txt", ready, min) or rows["compile x10"][1]
    row("KB compile, shipped KB", f"{c1:.2f} s wall", "", "< 1 s", c1 < 1)
    row("KB compile, 10x KB", f"{c10:.2f} s wall", "", "< 10 s", c10 < 10)
    st = rows["startup (no database cache)"][1]
    warm = rows["startup (database cache warm)"][1]
    row("start-up to ready (`scan /dev/null`), database cache cold / warm", f"{st:.2f} / {warm:.2f} s wall", "",
        "< 2 s", st < 2)
    row("throughput drop with the KB grown 10x", f"{fl:.0f} -> {fl10:.0f} MB/s", f"{fl / fl10:.2f}x slower",
        "< 2x", fl / fl10 < 2)
    for name, what in (("run-1-line", "one line per record"), ("run-20-lines", "20 lines per record")):
        if name in kafka:
            k = kafka[name]
            mib = k["bytes"] / 2**20
            row(f"`faultline run` (Kafka to Kafka) vs `kcat -C -e -q`, {what}",
                f"{mib / k['fl']:.0f} vs {mib / k['kcat']:.0f} MiB/s ({k['records']} records)",
                f"{k['kcat'] / k['fl']:.2f}x", ">= 1.0x", k["kcat"] / k["fl"] >= 1.0)
    if "rss-small" in kafka and "rss-big" in kafka:
        s_mb, b_mb = kafka["rss-small"]["bytes"] / 1e6, kafka["rss-big"]["bytes"] / 1e6
        small, big = kafka["rss-small"]["peak_kb"] / 1024, kafka["rss-big"]["peak_kb"] / 1024
        row(f"`faultline run` peak RSS, {s_mb:.0f} MB vs {b_mb:.0f} MB backlog", f"{small:.0f} vs {big:.0f} MiB",
            f"{big / small:.2f}x", "within 20%", big / small <= 1.2)
    if incidents is not None:
        peak = incidents.get("peak_rss_mib", 0.0)
        jobs = incidents.get("jobs", 0)
        row(f"incident state, {jobs} distinct jobs through the correlator (`faultline bench incidents`)",
            f"peak RSS {peak:.0f} MiB", "", "< 300 MB", peak * 2**20 < 300e6)
    out.append("")
    out.append("## All measurements\n")
    out.append("| run | CPU s | wall s | MB/s (CPU) |")
    out.append("|---|---|---|---|")
    for name, (cpu, wall, read) in rows.items():
        rate = f"{read / cpu / 1e6:.1f}" if not name.startswith(("compile", "startup", "wc")) and cpu > 0 else ""
        out.append(f"| {name} | {cpu:.3f} | {wall:.3f} | {rate} |")
    out.append("")
    whole = f"raw Hyperscan with each pattern scanned for itself (the database before required literals) {hs_whole:.0f} MB/s, " if hs_whole else ""
    out.append(f"Other references from the same run: {whole}raw Hyperscan one call per line {hs_line:.0f} MB/s, "
               f"`wc -l` {size / max(rows['wc -l'][1], 0.001) / 1e6:.0f} MB/s wall; raw Hyperscan's whole process (start-up, KB load, reads) {hs_proc:.0f} MB/s; `faultline scan` on all {cores} cores {allcores:.0f} MB/s wall "
               "(reader, workers and writer threads; on a loaded machine the wall figure is what it is).\n")
    out.append("`faultline scan` runs with its compiled-database cache warm (`FAULTLINE_CACHE_DIR`), as it does "
               "from the second run on; the compile rows time `hs_compile_multi` itself, without the cache.\n")
    if kafka:
        out.append("## Kafka\n")
        out.append("`scripts/bench-kafka.sh`: librdkafka's mock broker in a process of its own (initial "
                   "rebalance delay 0, as a test broker is configured), one backlog topic; `kcat -C -e -q` "
                   "reads it to /dev/null, then `faultline run` (consumer group, built-in KB, events to an "
                   "output topic, offsets committed) works through the same backlog; "
                   f"{next(iter(kafka.values()))['runs']} such rounds per row, and the best time of each "
                   "side is compared (the machine's speed drifts between rounds), with the highest peak "
                   "RSS of any round. Both unpinned: librdkafka's threads, the broker and faultline's "
                   "stages share the cores. Wall time from each process's start to its exit: kcat with "
                   "`-e`, faultline with `--exit-at-end` (it stops once every partition is read to its end, "
                   "every event produced and every offset committed); steady state from the first record "
                   "matched (sampled every 0.2 s). The backlog is produced in batches of up to 1 MiB, as a "
                   "busy shipper sends them (the mock broker looks up a fetch's offset by walking a "
                   "partition's batches, so thousands of tiny batches make the broker the bottleneck), "
                   "and spread over partitions of at most 5 MiB each (the mock broker's retention).\n")
        out.append("| run | backlog | partitions | records | kcat s | faultline s | ratio | steady-state ratio | peak RSS |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for name, k in kafka.items():
            # faultline's steady-state rate, scaled to the whole backlog, against kcat's time.
            whole = k["steady"] * k["records"] / max(k["steady_records"], 1)
            steady = k["kcat"] / whole if whole > 0 else float("inf")
            out.append(f"| {name} | {k['bytes'] / 2**20:.0f} MiB, {k['lpr']} line(s)/record | {k['parts']} | {k['records']} | "
                       f"{k['kcat']:.2f} | {k['fl']:.2f} | {k['kcat'] / k['fl']:.2f}x | {steady:.2f}x | "
                       f"{k['peak_kb'] / 1024:.0f} MiB |")
        out.append("")
    out.append("## Throughput against KB size\n")
    out.append("![throughput against KB size](docs/bench-kb-scaling.svg)\n")
    out.append("The KB is grown by `faultline bench scale-kb`: each entry plus copies whose patterns start "
               "with a literal of their own, so the matcher has that many more distinct signatures.\n")
    open("BENCHMARKS.md", "w", encoding="utf-8").write("\n".join(out))

    # The plot: MB/s against KB factor for faultline, raw Hyperscan and ripgrep.
    factors = [1, 2, 5, 10]
    series = [
        ("faultline scan", "faultline-scan", "#d62728"),
        ("raw Hyperscan (buffers)", "raw-hyperscan-buffer", "#1f77b4"),
        ("ripgrep -f", "ripgrep", "#2ca02c"),
    ]
    # A series' points at the KB sizes it was measured at (ripgrep: BENCH_RG_FACTORS).
    data = {label: [(i, mbps(f"{key} x{f}")) for i, f in enumerate(factors) if f"{key} x{f}" in rows]
            for label, key, _ in series}
    top = max(v for pts in data.values() for _, v in pts) * 1.1
    w, h, left, bottom, pad = 640, 400, 70, 50, 20

    def x(i):
        return left + i * (w - left - pad) / (len(factors) - 1)

    def y(v):
        return h - bottom - v / top * (h - bottom - pad)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - pad}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">KB size (x shipped KB)</text>',
           f'<text x="16" y="{h / 2}" transform="rotate(-90 16 {h / 2})" text-anchor="middle">MB/s (one core)</text>']
    for i, f in enumerate(factors):
        svg.append(f'<text x="{x(i)}" y="{h - bottom + 16}" text-anchor="middle">{f}x</text>')
    for k in range(5):
        v = top * k / 4
        svg.append(f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
        svg.append(f'<line x1="{left}" y1="{y(v)}" x2="{w - pad}" y2="{y(v)}" stroke="#ddd"/>')
    for n, (label, _, color) in enumerate(series):
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in data[label])
        svg.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for i, v in data[label]:
            svg.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>')
        svg.append(f'<text x="{w - pad - 170}" y="{pad + 14 + 16 * n}" fill="{color}">{label}</text>')
    svg.append("</svg>")
    os.makedirs("docs", exist_ok=True)
    open("docs/bench-kb-scaling.svg", "w", encoding="utf-8").write("\n".join(svg) + "\n")
    print(open("BENCHMARKS.md", encoding="utf-8").read())


if __name__ == "__main__":
    main()
