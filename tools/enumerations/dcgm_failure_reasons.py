#!/usr/bin/env python3
"""DCGM's failure-reason messages (dcgmlib/dcgm_errors.h, DCGM_FR_*_MSG) as data.

Usage (from the repository root):

    python3 tools/enumerations/dcgm_failure_reasons.py --git DCGM_GIT     # rewrite dcgm-failure-reasons.tsv
    python3 tools/enumerations/dcgm_failure_reasons.py --check            # every mapped wording recognised?
    python3 tools/enumerations/dcgm_failure_reasons.py --check --all      # also count the unmapped rows

`--git` reads dcgm_errors.h at every release tag of a clone or bare mirror of NVIDIA/DCGM (the file is
dcgmlib/dcgm_errors.h at v2.1.4 .. v4.6.0; `git ls-tree` finds it wherever it is), expands each
`DCGM_FR_<NAME>_MSG` and `DCGM_FR_<NAME>_NEXT` macro (adjacent literals joined, the shared next-step
macros such as TRIAGE_RUN_FIELD_DIAG_MSG substituted) and writes one row per name and wording with the
tags that have it. The mapping columns (`kb_entry`, `error_code`) come from MAP below: the KB entry that
owns the failure, `-` for messages a training fleet does not act on (argument checks, skips, internal
errors). Rows whose %s is a DCGM field tag (`Detected %ld %s for GPU %u`: the diag's and health watch's
generic field-violation texts) get one row per field tag (column `arg`), because the field decides the
failure.

`--check` renders each mapped row's wording into sample lines (the message alone, then the message and
its next step as the health watch and dcgmi health print them, prefixed the way nv-hostengine's log does)
and asks `faultline scan` which entries match; it exits 1 when a mapped row's line does not match its
`kb_entry`. It also reports how many rows are recognised in the first 45-character row of `dcgmi diag`
(DCGM 3.x/4.x cut the message into 45-character pieces, `| Warning: GPU0 | <45 chars> |`), which
patterns anchored on the message's first words still recognise. The patterns themselves are hand-written
in the entries (their review rows name the tags read). Python 3.8+, standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import tables

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TSV = os.path.join(HERE, "dcgm-failure-reasons.tsv")
COLUMNS = ["name", "number", "wording", "arg", "tags", "message", "next", "kb_entry", "error_code"]

# DCGM field tags (dcgmlib/src/dcgm_fields.cpp, the same at v2.4.7, v3.3.9 and v4.6.0) that the diag plugins
# (nvvs DcgmRecorder::FormatFieldViolationError / AddFieldThresholdViolationError) and the health watch put
# into 'Detected %ld %s for GPU %u'; '-' for the rows whose %s is not a field tag.
FIELD_ARGS = {
    "ecc_dbe_volatile_total": "nvidia/xid-48-dbe-ecc",
    "ecc_sbe_volatile_total": "nvidia/xid-92-high-sbe-rate",
    "pcie_replay_counter": "nvidia/dcgm-pcie-replays",
    "nvlink_flit_crc_error_count_total": "nvidia/dcgm-nvlink-errors",
    "nvlink_data_crc_error_count_total": "nvidia/dcgm-nvlink-errors",
    "nvlink_replay_error_count_total": "nvidia/dcgm-nvlink-errors",
    "nvlink_recovery_error_count_total": "nvidia/dcgm-nvlink-errors",
    "nvswitch_fatal_error": "nvidia/nvswitch-sxid-fatal",
    "nvswitch_non_fatal_error": "nvidia/nvswitch-sxid",
    # modules/health/DcgmHealthWatch.cpp (v4.x) passes a label instead of a tag
    "Fabric Health: Route Unhealthy": "nvidia/nvlink-fabric-health-unhealthy",
    "Fabric Health: Incorrect Configuration": "nvidia/nvlink-fabric-health-unhealthy",
}
# the generic rows whose %s is a field tag (one table row per FIELD_ARGS key)
FIELD_ROWS = {"FIELD_VIOLATION", "FIELD_THRESHOLD", "SBE_VIOLATION", "DBE_VIOLATION", "PCIE_REPLAY_VIOLATION",
              "SBE_THRESHOLD_VIOLATION", "DBE_THRESHOLD_VIOLATION", "PCIE_REPLAY_THRESHOLD_VIOLATION"}
# which field tags each of those rows is printed with (FormatFieldViolationError's switch at v4.6.0; before
# v3.3.1 every field went through FIELD_VIOLATION / FIELD_THRESHOLD)
FIELD_ROW_ARGS = {
    "SBE_VIOLATION": ["ecc_sbe_volatile_total"], "SBE_THRESHOLD_VIOLATION": ["ecc_sbe_volatile_total"],
    "DBE_VIOLATION": ["ecc_dbe_volatile_total"], "DBE_THRESHOLD_VIOLATION": ["ecc_dbe_volatile_total"],
    "PCIE_REPLAY_VIOLATION": ["pcie_replay_counter"], "PCIE_REPLAY_THRESHOLD_VIOLATION": ["pcie_replay_counter"],
}

# Rows whose %s names the cause: the clocks-event detail DcgmRecorder::CheckForClocksEvent appends
# ('clocks_throttle_reason_<x>: ...' to v3.3.9, 'clocks_event_reason_<x>: ...' from v4.0.0), one row per reason.
REASON_ROWS = {"THROTTLING_VIOLATION": "clocks_throttle_reason_", "CLOCKS_EVENT_VIOLATION": "clocks_event_reason_"}
REASON_ARGS = {
    "hw_slowdown": "nvidia/dcgm-power-violation",
    "hw_power_brake_slowdown": "nvidia/dcgm-power-violation",
    "sw_thermal_slowdown": "nvidia/dcgm-thermal-violation",
    "hw_thermal_slowdown": "nvidia/dcgm-thermal-violation",
}
# What the callers pass for a %s that is not a field tag (nvvs and health-watch sources at v3.3.9 and v4.6.0).
SAMPLE_S = {
    "TEMP_VIOLATION": "GPU", "TARGET_POWER": "target_power_min_ratio", "GFLOPS_THRESHOLD_VIOLATION": "GFLOPs",
    "LOW_BANDWIDTH": "d2h", "HIGH_LATENCY": "d2h", "PCIE_GENERATION": "min_pci_generation",
    "PCIE_WIDTH": "min_pci_width", "NVLINK_ERROR_THRESHOLD": "nvlink_replay_error_count_total",
    "NVLINK_ERROR_CRITICAL": "nvlink_data_crc_error_count_total",
    "NVLINK_CRC_ERROR_THRESHOLD": "nvlink_flit_crc_error_count_total",
}
# Wordings left unmapped although the name is mapped: v2.1.4's bare 'Row remapping failed.' names no GPU
# and is not specific enough to recognise alone.
UNMAPPED_WORDINGS = {("ROW_REMAP_FAILURE", "Row remapping failed.")}

# name -> kb_entry for the failures a training fleet acts on; every other name maps to '-'.
MAP = {
    # ECC, retired pages, row remapping
    "VOLATILE_DBE_DETECTED": "nvidia/xid-48-dbe-ecc",
    "CUDA_DBE": "nvidia/xid-48-dbe-ecc",
    "VOLATILE_SBE_DETECTED": "nvidia/xid-92-high-sbe-rate",
    "UNCONTAINED_ERROR": "nvidia/xid-95-uncontained-ecc",
    "CONTAINED_ERROR": "nvidia/xid-94-contained-ecc",
    "PENDING_PAGE_RETIREMENTS": "nvidia/nvml-row-remap-pending",
    "DBE_PENDING_PAGE_RETIREMENTS": "nvidia/nvml-row-remap-pending",
    "PENDING_ROW_REMAP": "nvidia/nvml-row-remap-pending",
    "RETIRED_PAGES_LIMIT": "nvidia/nvml-row-remap-failure",
    "RETIRED_PAGES_DBE_LIMIT": "nvidia/nvml-row-remap-failure",
    "ROW_REMAP_FAILURE": "nvidia/nvml-row-remap-failure",
    "UNCORRECTABLE_ROW_REMAP_LIMIT": "nvidia/nvml-row-remap-failure",
    "UNCORRECTABLE_ROW_REMAP": "nvidia/xid-63-row-remap-event",
    # memory and stress tests
    "FAULTY_MEMORY": "nvidia/dcgm-memory-test-failed",
    "MEMORY_MISMATCH": "nvidia/dcgm-memory-test-failed",
    "L1TAG_MISCOMPARE": "nvidia/dcgm-memory-test-failed",
    "NAN_VALUE": "nvidia/dcgm-memory-test-failed",
    "SRAM_THRESHOLD": "nvidia/dcgm-memory-test-failed",
    "MEMORY_BANDWIDTH": "nvidia/dcgm-diag-below-threshold",
    "LOW_BANDWIDTH": "nvidia/dcgm-diag-below-threshold",
    "HIGH_LATENCY": "nvidia/dcgm-diag-below-threshold",
    "STRESS_LEVEL": "nvidia/dcgm-diag-below-threshold",
    "TARGET_POWER": "nvidia/dcgm-diag-below-threshold",
    "GFLOPS_THRESHOLD_VIOLATION": "nvidia/dcgm-diag-below-threshold",
    # PCIe
    "PCI_REPLAY_RATE": "nvidia/dcgm-pcie-replays",
    "PCIE_REPLAYS": "nvidia/dcgm-pcie-replays",
    "PCIE_H_REPLAY_VIOLATION": "nvidia/dcgm-pcie-replays",
    "PCIE_GENERATION": "nvidia/dcgm-pcie-link-degraded",
    "PCIE_WIDTH": "nvidia/dcgm-pcie-link-degraded",
    # NVLink, NVSwitch, fabric
    "NVLINK_ERROR_THRESHOLD": "nvidia/dcgm-nvlink-errors",
    "NVLINK_CRC_ERROR_THRESHOLD": "nvidia/dcgm-nvlink-errors",
    "NVLINK_ERROR_CRITICAL": "nvidia/dcgm-nvlink-errors",
    "NVLINK_EFFECTIVE_BER_THRESHOLD": "nvidia/dcgm-nvlink-errors",
    "NVLINK_SYMBOL_BER_THRESHOLD": "nvidia/dcgm-nvlink-errors",
    "GPU_EXPECTED_NVLINKS_UP": "nvidia/dcgm-nvlink-down",
    "NVSWITCH_EXPECTED_NVLINKS_UP": "nvidia/dcgm-nvlink-down",
    "NVSWITCH_DOWN": "nvidia/dcgm-nvlink-down",
    "NVSWITCH_NVLINK_DOWN": "nvidia/dcgm-nvlink-down",
    "NVSWITCH_FATAL_ERROR": "nvidia/nvswitch-sxid-fatal",
    "SXID_ERROR": "nvidia/nvswitch-sxid-fatal",
    "NVSWITCH_NON_FATAL_ERROR": "nvidia/nvswitch-sxid",
    # Xid, lost GPU, recovery actions, inforom
    "XID_ERROR": "nvidia/xid",
    "FALLEN_OFF_BUS": "nvidia/xid-79-fallen-off-bus",
    "GPU_RECOVERY_RESET": "nvidia/xid-154-recovery-action",
    "GPU_RECOVERY_REBOOT": "nvidia/xid-154-recovery-action",
    "GPU_RECOVERY_DRAIN_P2P": "nvidia/xid-154-recovery-action",
    "GPU_RECOVERY_DRAIN_RESET": "nvidia/xid-154-recovery-action",
    "CORRUPT_INFOROM": "nvidia/inforom-corrupted",
    # thermal and power
    "CLOCK_THROTTLE_THERMAL": "nvidia/dcgm-thermal-violation",
    "CLOCKS_EVENT_THERMAL": "nvidia/dcgm-thermal-violation",
    "THERMAL_VIOLATIONS": "nvidia/dcgm-thermal-violation",
    "THERMAL_VIOLATIONS_TS": "nvidia/dcgm-thermal-violation",
    "TEMP_VIOLATION": "nvidia/dcgm-thermal-violation",
    "CLOCK_THROTTLE_POWER": "nvidia/dcgm-power-violation",
    "CLOCKS_EVENT_POWER": "nvidia/dcgm-power-violation",
    "THROTTLING_VIOLATION": "nvidia/dcgm-power-violation",
    "CLOCKS_EVENT_VIOLATION": "nvidia/dcgm-power-violation",
    "ENFORCED_POWER_LIMIT": "nvidia/dcgm-power-violation",
}


def git(repo, *args):
    return subprocess.run(["git", "-C", repo] + list(args), capture_output=True, text=True, check=True).stdout


def tag_key(tag):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.v-]", tag) if x]


def parse_header(src):
    """Expand every DCGM_FR_*_MSG / _NEXT macro of one dcgm_errors.h; enum numbers too."""
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    numbers = {m.group(1): int(m.group(2)) for m in re.finditer(r"\bDCGM_FR_(\w+)\s*=\s*(\d+)", src)}
    src = src.replace("\\\n", " ")
    defs = {m.group(1): m.group(2).strip() for m in re.finditer(r"^[ \t]*#define[ \t]+(\w+)[ \t]+([^\n]*)$", src, re.M)}

    def expand(name, depth=0):
        body = defs.get(name)
        if body is None or depth > 8:
            return None
        out = []
        for tok in re.finditer(r'"((?:[^"\\]|\\.)*)"|(\w+)', body):
            if tok.group(1) is not None:
                out.append(tok.group(1).encode("utf-8").decode("unicode_escape"))
            else:
                sub = expand(tok.group(2), depth + 1)
                if sub is None:
                    return None
                out.append(sub)
        return "".join(out)

    msgs, nexts = {}, {}
    for key in defs:
        m = re.fullmatch(r"DCGM_FR_(\w+)_(MSG|NEXT)", key)
        if m:
            (msgs if m.group(2) == "MSG" else nexts)[m.group(1)] = expand(key)
    return msgs, nexts, numbers


def tag_ranges(tags, have):
    """'v2.1.4..v4.6.0' style spans of consecutive tags."""
    spans, run = [], []
    for t in tags:
        if t in have:
            run.append(t)
        elif run:
            spans.append(run)
            run = []
    if run:
        spans.append(run)
    return ",".join(r[0] if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in spans)


def extract(repo):
    tags = sorted((t for t in git(repo, "tag").split() if re.fullmatch(r"v\d+\.\d+\.\d+", t)), key=tag_key)
    seen = {}  # (name, message) -> {tags, next, number}
    order = []
    for tag in tags:
        path = [p for p in git(repo, "ls-tree", "-r", "--name-only", tag).split() if p.endswith("/dcgm_errors.h")]
        if not path:
            continue
        msgs, nexts, numbers = parse_header(git(repo, "show", f"{tag}:{path[0]}"))
        for name, msg in msgs.items():
            key = (name, msg or "")
            if key not in seen:
                seen[key] = {"tags": [], "next": "", "number": ""}
                order.append(key)
            seen[key]["tags"].append(tag)
            seen[key]["next"] = nexts.get(name) or ""
            seen[key]["number"] = str(numbers.get(name, ""))
    rows = []
    names = []
    for name, _ in order:
        if name not in names:
            names.append(name)
    for name in names:
        wordings = [k for k in order if k[0] == name]
        for i, key in enumerate(wordings, 1):
            info = seen[key]
            args = ["-"]
            if name in FIELD_ROWS:
                args = FIELD_ROW_ARGS.get(name, list(FIELD_ARGS))
            elif name in REASON_ROWS:
                args = list(REASON_ARGS)
            for arg in args:
                if name in REASON_ROWS:
                    entry = REASON_ARGS[arg]
                elif arg != "-":
                    entry = FIELD_ARGS.get(arg, "-")
                else:
                    entry = MAP.get(name, "-")
                if key in UNMAPPED_WORDINGS:
                    entry = "-"
                if arg.startswith("Fabric Health") and name != "FIELD_VIOLATION":
                    continue
                rows.append({
                    "name": "DCGM_FR_" + name, "number": info["number"], "wording": str(i), "arg": arg,
                    "tags": tag_ranges(tags, set(info["tags"])), "message": key[1], "next": info["next"],
                    "kb_entry": entry, "error_code": "",
                })
    return rows


def kb_codes(kb):
    codes = {}
    for dirpath, _, files in os.walk(kb):
        for f in files:
            if f.endswith(".toml"):
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                i = re.search(r'^id = "([^"]+)"', text, re.M)
                c = re.search(r'^error_code = "([^"]+)"', text, re.M)
                if i and c:
                    codes[i.group(1)] = c.group(1)
    return codes


def write(rows, kb):
    codes = kb_codes(kb)
    with open(TSV, "w", encoding="utf-8") as out:
        out.write("# DCGM failure reasons: dcgmlib/dcgm_errors.h DCGM_FR_<name>_MSG at every release tag of NVIDIA/DCGM,\n")
        out.write("# written by tools/enumerations/dcgm_failure_reasons.py --git (see its docstring and README.md).\n")
        out.write("# One row per name, wording and (for 'Detected %ld %s for GPU %u') field tag; kb_entry '-' = not mapped.\n")
        out.write("\t".join(COLUMNS) + "\n")
        for r in rows:
            r["error_code"] = codes.get(r["kb_entry"], "-") if r["kb_entry"] != "-" else "-"
            out.write("\t".join(r[c].replace("\t", " ").replace("\n", " ") or "-" for c in COLUMNS) + "\n")


def read():
    return tables.read_tsv(TSV)


def render(msg, arg, name=""):
    """Fill a printf format with plain values; %s with the row's field tag, reason or a neutral word."""
    short = name[len("DCGM_FR_"):]
    if short in REASON_ROWS:
        arg = REASON_ROWS[short] + arg + ": the GPU clocks were reduced."
    elif arg == "-" and short in SAMPLE_S:
        arg = SAMPLE_S[short]

    def conv(m):
        spec = m.group(0)
        if spec == "%%":
            return "%"
        if spec.endswith("s"):
            return arg if arg != "-" else "NVML_ERROR"
        if spec.endswith("e"):
            return "1.20e-05"
        if spec.endswith("f"):
            return "12.5" if ".1" in spec else ("12.50" if ".2" in spec else "12.500000")
        if spec.endswith("x"):
            return "0x1"
        return "3"
    return re.sub(r"%%|%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j)?[diouxXeEfgs]", conv, msg)


def samples(row):
    msg = render(row["message"], row["arg"], row["name"])
    nxt = row["next"] if row["next"] != "-" else ""
    full = (msg.rstrip() + " " + nxt).strip()
    return [
        msg,
        "ERROR [1514002:1514004] [[Health]] Detected a FAILURE in health system PCIe: '" + full + "'",
        "|                           | " + msg[:45].ljust(45) + "  |",
    ]


def check(args):
    rows = read()
    lines = []
    for r in rows:
        if r["kb_entry"] == "-" and not args.all:
            continue
        if not r["message"] or r["message"] == "-":
            continue
        for s in samples(r):
            lines.append((r, s))
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as tmp:
        for _, s in lines:
            tmp.write(s + "\n")
    out = subprocess.run([args.faultline, "scan", "--kb", args.kb, "--no-summary", "--no-incidents",
                          "--no-unknown", tmp.name], capture_output=True, text=True)
    os.unlink(tmp.name)
    hits = {}
    for l in out.stdout.splitlines():
        try:
            ev = json.loads(l)
        except ValueError:
            continue
        ln = (ev.get("source") or {}).get("line")
        ids = {ev.get("kb_id")} | {a.get("kb_id") if isinstance(a, dict) else a for a in ev.get("also") or []}
        hits.setdefault(ln, set()).update(i for i in ids if i)
    bad, full_ok, diag_ok, mapped, any_ok, unmapped = [], 0, 0, 0, 0, 0
    codes = kb_codes(args.kb)
    for r in rows:
        want = codes.get(r["kb_entry"], "-") if r["kb_entry"] != "-" else "-"
        if r["error_code"] != want:
            bad.append(f'{r["name"]} wording {r["wording"]} {r["arg"]}: error_code {r["error_code"]}, the entry has {want}')
    per_row = {}
    for idx, (r, s) in enumerate(lines):
        per_row.setdefault(id(r), (r, []))[1].append(hits.get(idx + 1, set()))
    for r, got in per_row.values():
        if r["kb_entry"] == "-":
            unmapped += 1
            if any(got[:2]):
                any_ok += 1
            continue
        mapped += 1
        ok_full = all(r["kb_entry"] in g for g in got[:2])
        full_ok += ok_full
        diag_ok += r["kb_entry"] in got[2]
        if not ok_full:
            bad.append(f'{r["name"]} wording {r["wording"]} {r["arg"]}: {r["kb_entry"]} not matched on {samples(r)[0]!r} (got {sorted(got[0])})')
    for b in bad:
        print("MISS", b)
    print(f"mapped rows: {mapped}; recognised by their entry (message and health-watch line): {full_ok}; "
          f"in the first 45-character row of dcgmi diag: {diag_ok}")
    if args.all:
        print(f"unmapped rows: {unmapped}; matched by some entry: {any_ok}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git", help="clone or bare mirror of NVIDIA/DCGM: rewrite the table from its tags")
    ap.add_argument("--check", action="store_true", help="check that the KB recognises every mapped row")
    ap.add_argument("--all", action="store_true", help="with --check, also report unmapped rows")
    ap.add_argument("--kb", default=os.path.join(ROOT, "kb"))
    ap.add_argument("--faultline", default=os.path.join(ROOT, "target", "release", "faultline"))
    args = ap.parse_args()
    if args.git:
        write(extract(args.git), args.kb)
        print(f"wrote {TSV}")
    if args.check:
        sys.exit(check(args))
    if not args.git and not args.check:
        ap.print_help()


if __name__ == "__main__":
    main()
