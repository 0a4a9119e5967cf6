#!/usr/bin/env python3
"""Generate one KB entry per documented NVIDIA Xid number from xid-catalogue.tsv.

Usage (from the repository root):

    python3 tools/xid-catalogue/gen.py            # writes kb/nvidia/xid-<n>-<slug>.toml
    python3 tools/xid-catalogue/gen.py --check    # exits 1 if a generated file is stale
    python3 tools/xid-catalogue/gen.py --verify-xid-format DIR  # exits 1 if kernel_rc.c's Xid format
                                                  # strings differ from XID_FORMAT_TAGS (DIR: a clone)

The data and where it comes from are described in README.md next to this script. Xids that
already have a hand-written entry (EXISTING below) are skipped: those entries keep their ids
and codes. Numbers the catalogue does not document stay with the generic `nvidia/xid` entry.
"""
import csv
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "kb", "nvidia")

# Xids with a hand-written entry in kb/nvidia (never generated).
EXISTING = {13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154}

BY = "faultline maintainers (AI-assisted), 2026-11"
# Parts re-reviewed in round 2 (issue 31): version rows per release branch, guarded GPU resets.
BY_R2 = "faultline maintainers (AI-assisted), 2026-12"
NVERROR_REPO = "NVIDIA/open-gpu-kernel-modules"
NVERROR_PATH = "src/common/sdk/nvidia/inc/nverror.h"
NVERROR_TSV = os.path.join(HERE, "nverror-by-tag.tsv")
# A GPU reset only when no compute process uses the GPU (nvidia-smi -r refuses or hangs otherwise).
GPU_RESET_CMD = ("nvidia-smi --query-compute-apps=pid --format=csv,noheader -i <gpu_index> | grep -q . "
                 "|| nvidia-smi -r -i <gpu_index>")
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
CATALOG_AGAINST = (
    "NVIDIA Xid catalog (" + CATALOG_URL + "; rows 1-13 read on the page, every row read through "
    "leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go, generated 2025-10-29 from "
    "NVIDIA's catalog spreadsheet); NVIDIA/dcgm-exporter internal/pkg/collector/xid_errors.go "
    "(Xid texts, older catalog); NVIDIA/open-gpu-kernel-modules src/common/sdk/nvidia/inc/nverror.h (names)"
)
FORMAT_REF = (
    "NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c krcReportXid_IMPL "
    "(XID_PRINT_WITH_ATTR: 'NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, "
    "[pid=%s, name=%s, ]%s'; examples without a public log are built from this format)"
)
KERNEL_RC_PATH = "src/nvidia/src/kernel/gpu/rc/kernel_rc.c"
# Driver tags at which the Xid format string of kernel_rc.c krcReportXid_IMPL was read (issue 31): the
# first and last tag of every release branch 515..595 and 570.123.01, where the wording changed; each
# tag maps to the format strings it prints (`--verify-xid-format DIR` re-reads them). Three wordings:
# three portDbgPrintf calls up to 565.77; XID_PRINT_WITH_ATTR from 570.86.15, which drops
# 'pid=%s, name=%s, ' when there is no process; ' caused by previous Xid %d' (rootCauseXidStr) appended
# from 570.123.01. The generated patterns accept all three.
XID_FORMAT_OLD = (
    '"NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, pid=%s, name=%s, %s\\n"',
    '"NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u): %d, pid=%s, name=%s, %s\\n"',
    '"NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s\\n"',
)
XID_FORMAT_ATTR = (
    '"NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s\\n"',
    '"NVRM: Xid (" attr "): %d, %s\\n"',
)
XID_FORMAT_ROOT = (
    '"NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s%s\\n"',
    '"NVRM: Xid (" attr "): %d, %s%s\\n"',
)
XID_FORMAT_TAGS = (
    [(t, XID_FORMAT_OLD) for t in (
        "515.43.04", "515.105.01", "520.56.06", "520.61.07", "525.47.04", "525.147.05", "530.30.02", "530.41.03",
        "535.43.02", "535.288.01", "545.23.06", "545.29.06", "550.40.07", "550.163.01", "555.42.02", "555.58.02",
        "560.28.03", "560.35.03", "565.57.01", "565.77")]
    + [("570.86.15", XID_FORMAT_ATTR)]
    + [(t, XID_FORMAT_ROOT) for t in (
        "570.123.01", "570.211.01", "575.51.02", "575.64.05", "580.65.06", "580.142", "590.44.01", "590.48.01",
        "595.44.02", "595.45.04")]
)
FORMAT_TAGS_AGAINST = (
    "; the format string read at the driver tags listed here (first and last tag of every branch 515 to 595, "
    "and 570.123.01): 'NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s' "
    "(three portDbgPrintf calls) to 565.77; XID_PRINT_WITH_ATTR from 570.86.15, without 'pid=%s, name=%s, ' "
    "when no process is known; ' caused by previous Xid %d' appended from 570.123.01; the patterns accept "
    "every one"
)
REFS_COMMON = [
    "NVIDIA Xid catalog: " + CATALOG_URL,
    "NVIDIA/open-gpu-kernel-modules src/common/sdk/nvidia/inc/nverror.h (Xid number definitions)",
    "NVIDIA/dcgm-exporter internal/pkg/collector/xid_errors.go (xidErrCodeToText, the catalog's Xid texts)",
    "leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go (machine copy of the catalog "
    "spreadsheet: mnemonic, description, immediate and investigatory resolution buckets)",
    FORMAT_REF,
]
NVLINK5_REFS = [
    "leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go nvlinkRules (copy of the "
    "catalog's 'XID 144-150 Decode' sheet: unit, error status, Fatal/Non-fatal, resolution)",
    "Real lines: leptonai/gpud#1160, leptonai/gpud#1174, NVIDIA/nccl#2241 (redacted PCI field)",
]

# What each resolution bucket of the catalog asks for, in words.
BUCKET = {
    "RESTART_APP": "restart the application",
    "RESET_GPU": "reset the GPU",
    "RESTART_BM": "restart the bare-metal node",
    "RESTART_VM": "restart the virtual machine",
    "IGNORE": "no action for this Xid by itself",
    "CONTACT_SUPPORT": "contact NVIDIA support",
    "CHECK_MECHANICALS": "check the mechanical installation (power connectors, seating)",
    "UPDATE_SWFW": "update the software and firmware",
    "CHECK_APP/CUDA": "check the application and its CUDA code",
    "INVESTIGATE_SW": "investigate the driver/software",
    "INVESTIGATE_SW_USER": "investigate the software and the user workload",
    "INVESTIGATE_LINK_SI": "investigate the link's signal integrity",
    "XID_137_FLOW": "follow the catalog's Xid 137 flow",
    "WORKFLOW_NVLINK5_ERR": "decode the NVLink5 unit and status",
    "CHECK_UVM": "check UVM",
    "SYMPATHETIC_REPORT_SOLO": "report it when it appears alone (otherwise it is sympathetic)",
}


def vkey(tag):
    return tuple(int(p) for p in tag.split("."))


def parse_nverror(text):
    """{xid: name} for every `#define NAME (N)` in nverror.h (the first name of a number wins)."""
    defs = {}
    for m in re.finditer(r"^#define\s+([A-Z0-9_]+)\s+\((\d+)\)", text, re.M):
        name, n = m.group(1), int(m.group(2))
        if name == "ROBUST_CHANNEL_LAST_ERROR" or n < 1:
            continue
        defs.setdefault(n, name)
    return defs


def git_nverror(gitdir, tag):
    return subprocess.run(["git", "-C", gitdir, "show", "%s:%s" % (tag, NVERROR_PATH)],
                          check=True, capture_output=True, text=True).stdout


def sample_tags(tags, defs):
    """The first and last tag of every branch, and every tag whose definitions differ from the tag
    before it in version order (with that tag): enough to place every change exactly."""
    keep = set()
    for i, t in enumerate(tags):
        major = t.split(".")[0]
        if i == 0 or tags[i - 1].split(".")[0] != major:
            keep.add(t)
        if i == len(tags) - 1 or tags[i + 1].split(".")[0] != major:
            keep.add(t)
        if i > 0 and defs[t] != defs[tags[i - 1]]:
            keep.update((t, tags[i - 1]))
    return sorted(keep, key=vkey)


def extract_nverror(gitdir):
    """Write nverror-by-tag.tsv from a clone of NVIDIA/open-gpu-kernel-modules."""
    tags = subprocess.run(["git", "-C", gitdir, "tag"], check=True, capture_output=True, text=True).stdout.split()
    tags = sorted((t for t in tags if re.fullmatch(r"\d+(\.\d+)+", t)), key=vkey)
    defs = {t: parse_nverror(git_nverror(gitdir, t)) for t in tags}
    with open(NVERROR_TSV, "w", encoding="utf-8") as f:
        f.write("tag\txid\tname\n")
        for t in sample_tags(tags, defs):
            for n in sorted(defs[t]):
                f.write("%s\t%d\t%s\n" % (t, n, defs[t][n]))


def verify_nverror(gitdir):
    """Exit 1 when nverror-by-tag.tsv disagrees with nverror.h at any tag it lists."""
    table = load_nverror()
    bad = 0
    for t in table["tags"]:
        if parse_nverror(git_nverror(gitdir, t)) != table["defs"][t]:
            print("differs from nverror.h:", t)
            bad += 1
    print("%d tags checked, %d differ" % (len(table["tags"]), bad))
    if bad:
        sys.exit(1)


def load_nverror():
    defs = {}
    for x in csv.DictReader(open(NVERROR_TSV, encoding="utf-8"), delimiter="\t"):
        defs.setdefault(x["tag"], {})[int(x["xid"])] = x["name"]
    return {"tags": sorted(defs, key=vkey), "defs": defs}


def is_reserved(name):
    return bool(re.fullmatch(r"RESERVED\d*_ERROR|RESERVED_XID|ROBUST_CHANNEL_UNUSED_ERROR_\d+", name))


def xid_history(n, table):
    """Per sampled tag: (kind, name), kind one of named, other (a name that is another Xid's at the
    newest tag: the number meant something else), reserved, None (not defined)."""
    newest = table["defs"][table["tags"][-1]]
    elsewhere = {name: x for x, name in newest.items() if x != n}
    out = []
    for t in table["tags"]:
        name = table["defs"][t].get(n)
        if name is None:
            out.append((t, None, None))
        elif is_reserved(name):
            out.append((t, "reserved", name))
        elif name in elsewhere:
            out.append((t, "other", name))
        else:
            out.append((t, "named", name))
    return out


def stretches(n, table):
    """Rows (kind, first tag, last tag, range, names) of the tags where Xid n is defined, one per
    release branch stretch: `>=first,<next` where the next tag in version order of the same branch does
    not define it, `>=first,<major+1` at the end of a branch, an open `>=first` when it reaches the
    newest tag. Reserved-only numbers (never named) use their reserved stretches."""
    hist = xid_history(n, table)
    kinds = {k for (_, k, _) in hist}
    want = {"named", "other"} if "named" in kinds else {"reserved", "other"}
    rows = []
    for i, (t, k, name) in enumerate(hist):
        if k not in want:
            continue
        major = t.split(".")[0]
        prev = hist[i - 1] if i else None
        if prev and prev[1] == k and prev[0].split(".")[0] == major:
            rows[-1][2] = t
            if name not in rows[-1][4]:
                rows[-1][4].append(name)
            continue
        rows.append([k, t, t, None, [name]])
    tags = table["tags"]
    for row in rows:
        last = row[2]
        i = tags.index(last)
        major = last.split(".")[0]
        if i == len(tags) - 1:
            row[3] = ">=%s" % row[1]
        elif tags[i + 1].split(".")[0] == major:
            row[3] = ">=%s,<%s" % (row[1], tags[i + 1])
        else:
            row[3] = ">=%s,<%d" % (row[1], int(major) + 1)
    return rows


def version_rows(n, table):
    out = []
    newest = table["defs"][table["tags"][-1]]
    for kind, first, last, rng, names in stretches(n, table):
        span = first if first == last else "%s to %s" % (first, last)
        if kind == "other":
            now = ", ".join("Xid %d" % x for x, nm in sorted(newest.items()) if nm in names)
            text = ("in these drivers nverror.h gives Xid %d to %s (%s from the newest tag): a Xid %d line "
                    "from them is not this error (%s %s)" % (n, "/".join(names), now, n, NVERROR_REPO, span))
            status = "changed"
        elif kind == "reserved":
            text = "defined only as %s (reserved, unnamed) in nverror.h of %s %s" % ("/".join(names), NVERROR_REPO, span)
            status = "active"
        else:
            text = "defined as %s in nverror.h of %s %s" % ("/".join(names), NVERROR_REPO, span)
            status = "active"
        out.append((rng, status, text))
    return out


def versions_against(n, table):
    parts = []
    for kind, first, last, rng, names in stretches(n, table):
        span = first if first == last else "%s-%s" % (first, last)
        parts.append("%s%s" % (span, "" if kind != "other" else " as " + "/".join(names)))
    tags = table["tags"]
    return ("%s %s at every release tag %s to %s (tools/xid-catalogue/nverror-by-tag.tsv keeps the first and "
            "last tag of each branch and every tag where the definitions change); Xid %d defined in: %s"
            % (NVERROR_REPO, NVERROR_PATH, tags[0], tags[-1], n, "; ".join(parts)))


def format_tags(n, table):
    """The XID_FORMAT_TAGS read inside the stretches where Xid n is defined (all of them below 136)."""
    spans = [(vkey(first), vkey(last)) for _, first, last, _, _ in stretches(n, table)] if n >= 136 else []
    return [t for t, _ in XID_FORMAT_TAGS if not spans or any(a <= vkey(t) <= b for a, b in spans)]


def verify_xid_format(gitdir):
    """Exit 1 when the Xid format strings of kernel_rc.c differ from XID_FORMAT_TAGS at a tag it lists."""
    bad = 0
    for t, want in XID_FORMAT_TAGS:
        text = subprocess.run(["git", "-C", gitdir, "show", "%s:%s" % (t, KERNEL_RC_PATH)],
                              check=True, capture_output=True, text=True).stdout
        got = tuple(re.findall(r'"NVRM: Xid \((?:"[^"\n]*"|[^"\n])*"', text))
        if got != want:
            print("differs from kernel_rc.c:", t, got)
            bad += 1
    print("%d tags checked, %d differ" % (len(XID_FORMAT_TAGS), bad))
    if bad:
        sys.exit(1)


def bucket_words(b):
    if not b:
        return ""
    return BUCKET.get(b, b.lower().replace("_", " "))


def slug(mnemonic):
    s = mnemonic.split("/")[0].strip()
    s = re.sub(r"^ROBUST_CHANNEL_", "", s)
    s = s.lower().replace("_", "-")
    s = re.sub(r"[^a-z0-9-]", "", s)
    return s[:40].strip("-")


def q(s):
    """A TOML string for one log line or pattern."""
    if "'" not in s and "\n" not in s:
        return "'" + s + "'"
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def xid_pattern(n, tail=""):
    # Tolerant of odd or redacted PCI fields ("PCI:...", "PCI:0000:XX:00", no "PCI:" prefix).
    return (r"NVRM: Xid \((?:PCI:)?(?P<gpu>[^)\s]{0,32})(?: GPU-I:\d+)?(?: GPU-CI:\d+)?\): "
            r"(?P<xid>%d)\b%s" % (n, tail))


def caused_by_pattern(n):
    return (r"NVRM: Xid \([^)\n]{0,48}\): 45, [^\n]*caused by previous Xid (?P<xid>%d)\b" % n)


def examples_for(n, reals, nonfatal=None):
    lines = [l for l in reals.get(n, [])]
    if nonfatal is True:
        return [l for l in lines if " Nonfatal " in l]
    if nonfatal is False:
        lines = [l for l in lines if " Nonfatal " not in l]
    built = [
        "[ 9021.402113] NVRM: Xid (PCI:0000:3b:00): %d, pid='<unknown>', name=<unknown>, " % n,
        "NVRM: Xid (PCI:0000:3b:00): %d, pid=48213, name=python3, Ch 00000008" % n,
    ]
    if 144 <= n <= 150:
        built = ["NVRM: Xid (PCI:0008:01:00): %d, pid=11436, name=python3, UNIT Fatal XC0 i0 Link 03 "
                 "(0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)" % n]
    out = [l for l in lines if "caused by previous" not in l]
    caused = [l for l in lines if "caused by previous" in l]
    if not out:
        out = built
    elif len(out) < 2:
        out = out + built[:1]
    return out + caused


def negatives_for(n):
    other = 13 if n != 13 else 31
    neg = [
        "NVRM: Xid (PCI:0000:3b:00): %d, pid=48213, name=python3, hypothetical longer Xid number" % (n * 10 + 1),
        "[11039.523185] NVRM: Xid (PCI:0000:07:00): 43, pid=916085, name=python3, Ch 00000008",
        "NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
    ]
    if n != 1:
        neg.insert(0, "NVRM: Xid (PCI:0000:3b:00): %d, pid=48213, name=python3, a neighbouring Xid" % (n + 1 if n + 1 not in (13,) else n + 2))
    return neg


def root_cause(r):
    n = int(r["xid"])
    mn = r["mnemonic"]
    desc = r["description"]
    older = r["older_description"]
    imm, inv = r["immediate"], r["investigatory"]
    parts = []
    names = mn
    if r["nverror_name"]:
        names += ", " + r["nverror_name"] + " in nverror.h"
    if desc and desc != "Unused":
        parts.append("Xid %d (%s): %s." % (n, names, desc.rstrip(".")))
    elif desc == "Unused":
        what = (" Older GPUs (Volta and earlier) used it for: %s." % older) if older and older not in ("Unused", "Reserved") else ""
        tail = ("" if imm == "IGNORE" else
                " Seeing it on a current GPU is unexpected: collect an nvidia-bug-report and contact NVIDIA.")
        parts.append("Xid %d (%s) is marked unused in NVIDIA's catalog for Ampere and newer GPUs.%s%s"
                     % (n, names, what, tail))
    else:
        parts.append("Xid %d (%s): %s." % (n, names, (older or "no catalog description").rstrip(".")))
    same = sorted(older.lower().replace("robust channel ", "").split()) == sorted(desc.lower().split())
    if older and desc not in ("Unused", "") and older not in ("Unused", "Reserved") and not same:
        parts.append("The older catalog text reads \"%s\"." % older)
    if imm or inv:
        s = "The catalog's resolution buckets: immediate action %s (%s)" % (imm or "none", bucket_words(imm) or "-")
        if inv:
            s += ", investigatory action %s (%s)" % (inv, bucket_words(inv))
        parts.append(s + ".")
    elif n >= 162:
        parts.append("The catalog version read here gives no resolution bucket for it.")
    cls = r["role"]
    if inv == "CHECK_APP/CUDA":
        parts.append("The catalog points at the application or its CUDA stack (CHECK_APP/CUDA): look at the "
                     "process named by pid/name and the CUDA error it reported; the GPU itself is usually fine.")
    elif imm == "IGNORE":
        parts.append("On its own it needs no action: look for another Xid on the same GPU (PCI address in the "
                     "line) around the same time, which is the one to act on; if it repeats alone, follow the "
                     "investigatory action.")
    elif imm == "RESET_GPU":
        parts.append("The GPU should be reset before it gets new work; Xid 154 (GPU recovery action) on "
                     "drivers 565+ states the action the driver wants.")
    elif imm == "RESTART_APP":
        parts.append("An engine fault on the channel of the process named in the line: the process dies, the "
                     "GPU is normally usable again; if it repeats on the same GPU, follow the investigatory action.")
    if r["variant"] == "nvlink5":
        parts.append("NVLink5 (Blackwell/GB200 class) errors name the unit and say Fatal or Nonfatal in the line "
                     "(for example 'RLW_RXPIPE Nonfatal XC0 i0 Link 13 (...)'). In the catalog's decode most "
                     "Nonfatal statuses need no action and Fatal statuses need a GPU reset; a Link Fatal event "
                     "can be caused by the device at the other end of the link. A Nonfatal line is kept as a "
                     "symptom; this entry is the Fatal (and unspecified) form.")
    if n == 173:
        parts.append("NVIDIA's catalog copy used here ends at Xid 172; the name comes from nverror.h (driver 580 "
                     "and later). Treat it as a hardware fault of the GPU module: drain the node and involve NVIDIA.")
    if n in (171, 172):
        parts.append("It comes with Xid 48 and tells whether the uncorrectable error was in DRAM (171) or SRAM "
                     "(172); row remapping only repairs DRAM.")
    return " ".join(parts)


def workarounds(r):
    imm, inv = r["immediate"], r["investigatory"]
    n = int(r["xid"])
    w = []
    if imm == "RESET_GPU":
        w.append(("Stop the work on that GPU (drain the node in the scheduler), then reset the GPU (catalog "
                  "immediate action RESET_GPU). The command resets only when no process uses the GPU; if one "
                  "remains or the reset fails, reboot the node.", GPU_RESET_CMD))
    elif imm == "RESTART_APP":
        w.append(("Restart the application or job (catalog immediate action RESTART_APP).", None))
    elif imm == "RESTART_BM":
        w.append(("Drain the node and reboot it (catalog immediate action RESTART_BM).", None))
    elif imm == "RESTART_VM":
        w.append(("Restart the virtual machine (catalog immediate action RESTART_VM).", None))
    elif imm == "IGNORE":
        w.append(("No action for this Xid alone (catalog immediate action IGNORE); act on any other Xid the "
                  "same GPU logged around it.", None))
    elif imm == "CHECK_MECHANICALS":
        w.append(("Check that the board's auxiliary power cables are connected and seated (catalog immediate "
                  "action CHECK_MECHANICALS).", None))
    elif imm == "UPDATE_SWFW":
        w.append(("Update the vGPU software and firmware so that host and guest driver versions are compatible "
                  "(catalog action UPDATE_SWFW).", None))
    elif imm == "CHECK_UVM":
        w.append(("Check the UVM driver (nvidia-uvm) on the node (catalog immediate action CHECK_UVM).", None))
    elif imm == "WORKFLOW_NVLINK5_ERR":
        w.append(("Read the unit and Fatal/Nonfatal in the line: a Nonfatal NVLink5 error alone needs no action; "
                  "a Fatal one needs the GPU reset after its jobs are stopped (catalog WORKFLOW_NVLINK5_ERR). "
                  "Check the peer GPU/switch of the named link too.", None))
    if inv == "CHECK_APP/CUDA":
        w.append(("If it repeats, debug the application: rerun the failing step with CUDA_LAUNCH_BLOCKING=1 or "
                  "under compute-sanitizer to find the faulting kernel (catalog investigatory action CHECK_APP/CUDA).", None))
    elif inv == "INVESTIGATE_SW":
        w.append(("If it repeats, compare the driver version against NVIDIA's release notes and known issues and "
                  "update the driver (catalog investigatory action INVESTIGATE_SW).", None))
    elif inv == "INVESTIGATE_SW_USER":
        w.append(("If it repeats, review the software stack and the workload that drove the link (catalog "
                  "investigatory action INVESTIGATE_SW_USER).", None))
    elif inv == "INVESTIGATE_LINK_SI":
        w.append(("If it repeats on the same link, have the NVLink connections (cables, connectors, trays) "
                  "inspected for signal integrity (catalog investigatory action INVESTIGATE_LINK_SI).", None))
    elif inv == "XID_137_FLOW":
        w.append(("Follow the catalog's Xid 137 flow: it is usually reported alongside another NVLink error on "
                  "the same link; act on that one.", None))
    elif inv == "SYMPATHETIC_REPORT_SOLO":
        w.append(("If it appears alone (no other Xid on the GPU), report it to NVIDIA (catalog investigatory "
                  "action SYMPATHETIC_REPORT_SOLO).", None))
    if imm == "CONTACT_SUPPORT" or inv == "CONTACT_SUPPORT" or (not imm and not inv):
        w.append(("If it repeats on the same GPU, collect a bug report on the node and open a case with NVIDIA "
                  "(catalog action CONTACT_SUPPORT).", "sudo nvidia-bug-report.sh"))
    return w


def dead_ends(r):
    if r["investigatory"] == "CHECK_APP/CUDA":
        return [("Replace or RMA the GPU at the first occurrence",
                 "The catalog attributes this Xid to the application or CUDA stack (CHECK_APP/CUDA); the GPU "
                 "recovers when the process exits.")]
    if r["immediate"] == "IGNORE":
        return [("Drain the node for this Xid alone",
                 "The catalog's immediate action is IGNORE; the Xid to act on is the one logged with it.")]
    return []


def render(r, reals):
    n = int(r["xid"])
    nvl = r["variant"] == "nvlink5"
    role, sev, cat = r["role"], r["severity"], r["category"]
    eid = "nvidia/xid-%d-%s" % (n, slug(r["mnemonic"]))
    title_desc = r["description"] if r["description"] not in ("", "Unused") else (r["older_description"] or r["mnemonic"])
    if len(title_desc) > 60 and r["older_description"]:
        title_desc = r["older_description"]
    title = "Xid %d: %s" % (n, title_desc.rstrip("."))
    if r["description"] == "Unused":
        title += " (unused on current GPUs)"
    pats = [xid_pattern(n, r"(?:, pid=(?P<pid>\d+))?")]
    supersedes = []
    if role == "root":
        pats.append(caused_by_pattern(n))
        supersedes.append("nvidia/xid-45-preemptive-cleanup")
    exs = examples_for(n, reals, nonfatal=False if nvl else None)
    if role == "root":
        if not any("caused by previous" in e for e in exs):
            exs.append("NVRM: Xid (PCI:0000:3b:00): 45, pid=48213, name=python3, Ch 00000008 caused by previous Xid %d" % n)
    negs = negatives_for(n)
    verification = "community_reported" if nvl else "source_verified"
    pat_level = "community_reported" if nvl else "source_verified"
    pat_against = FORMAT_REF + "; redacted PCI fields seen in NVIDIA/nccl#2241; 'caused by previous Xid' from kernel_rc.c (bPrintRootCause)"
    if nvl:
        pat_against += "; the unit and Fatal/Nonfatal text comes from GSP firmware and was checked against real lines (" + NVLINK5_REFS[1].split(": ", 1)[1] + ")"
    refs = list(REFS_COMMON) + (NVLINK5_REFS if nvl else [])
    src_real = sorted({s for (x, s, l) in reals.get(("src", n), [])})
    if src_real:
        refs.append("Real lines: " + ", ".join(src_real))
    out = []
    out.append("# Generated by tools/xid-catalogue/gen.py from tools/xid-catalogue/xid-catalogue.tsv; edit the table, not this file.")
    out.append("id = %s" % q(eid))
    out.append("title = %s" % q(title))
    out.append('domain = "nvidia"')
    out.append('category = "%s"' % cat)
    out.append('error_code = "XID_%d"' % n)
    out.append('role = "%s"' % role)
    out.append('severity = "%s"' % sev)
    out.append('verification = "%s"' % verification)
    out.append('patterns_verified = "%s"' % ("real_log" if nvl else "source"))
    if supersedes:
        out.append("supersedes = [%s]" % ", ".join('"%s"' % s for s in supersedes))
    out.append('root_cause = """\n%s\n"""' % wrap(root_cause(r)))
    out.append("patterns = [\n%s\n]" % "\n".join("  %s," % q(p) for p in pats))
    out.append("examples = [\n%s\n]" % "\n".join("  %s," % q(e) for e in exs))
    out.append("negative_examples = [\n%s\n]" % "\n".join("  %s," % q(e) for e in negs))
    out.append("references = [\n%s\n]" % "\n".join("  %s," % q(x) for x in refs))
    rows = version_rows(n, NVERROR) if n >= 136 else []
    for rng, status, text in rows:
        out.append('\n[[versions]]\ncomponent = "driver"\nrange = "%s"\nstatus = "%s"\nintroduced = %s' % (
            rng, status, q(text)))
    for text, cmd in workarounds(r):
        out.append("\n[[workarounds]]\ntext = %s" % q(text) + ("\ncommand = %s" % q(cmd) if cmd else ""))
    for action, why in dead_ends(r):
        out.append("\n[[dead_ends]]\naction = %s\nwhy = %s" % (q(action), q(why)))
    ftags = format_tags(n, NVERROR)
    out.append('\n[[review]]\npart = "patterns"\nlevel = "%s"\nby = "%s"\nagainst = %s\ntags = [%s]' % (
        pat_level, BY_R2, q(pat_against + FORMAT_TAGS_AGAINST), ", ".join('"%s"' % t for t in ftags)))
    out.append('\n[[review]]\npart = "root_cause"\nlevel = "source_verified"\nby = "%s"\nagainst = %s' % (BY, q(CATALOG_AGAINST)))
    if workarounds(r):
        resets = any(cmd == GPU_RESET_CMD for _, cmd in workarounds(r))
        out.append('\n[[review]]\npart = "advice"\nlevel = "source_verified"\nby = "%s"\nagainst = %s' % (
            BY_R2 if resets else BY,
            q("NVIDIA Xid catalog resolution buckets (immediate and investigatory action) for Xid %d, read as in "
              "the root_cause review; nvidia-smi -r is the reset NVIDIA documents in its GPU memory error "
              "management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)%s" % (n, (
                  ", which needs the GPU idle: the command resets only when nvidia-smi --query-compute-apps "
                  "lists no process on it (nvidia-smi(1))") if resets else ""))))
    if rows:
        out.append('\n[[review]]\npart = "versions"\nlevel = "source_verified"\nby = "%s"\nagainst = %s' % (
            BY_R2, q(versions_against(n, NVERROR))))
    text = "\n".join(out) + "\n"
    files = [("xid-%d-%s.toml" % (n, slug(r["mnemonic"])), text)]
    if nvl:
        files.append(render_nonfatal(r, reals, eid))
    return files


def render_nonfatal(r, reals, main_id):
    n = int(r["xid"])
    eid = main_id + "-nonfatal"
    ex = examples_for(n, reals, nonfatal=True) or [
        "NVRM: Xid (PCI:0008:01:00): %d, pid=11436, name=python3, UNIT Nonfatal XC0 i0 Link 03 "
        "(0x00000000 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)" % n]
    # GB200 lines pad the unit column ("NETIR_LINK_EVT   Nonfatal  XC0"): allow runs of spaces.
    pat = xid_pattern(n, r", {1,8}(?:pid=[^,\n]*, name=[^,\n]*, {1,8})?[A-Z][A-Z0-9_/]* {1,16}Nonfatal\b")
    if len(ex) == 1:
        ex = ex + ["# the same line in a node's kernel log (syslog header).",
                   "Nov 29 09:02:41 gpu-node-02 kernel: " + ex[0]]
    ex = ex + ["NVRM: Xid (PCI:0008:01:00): %d, NETIR_LINK_EVT   Nonfatal  XC0 i0 Link 03 (0x00000000 0x00000008 "
               "0x00000000 0x00000000 0x00000000 0x00000000)" % n]
    negs = ["NVRM: Xid (PCI:0008:01:00): %d, pid=11436, name=python3, UNIT Fatal XC0 i0 Link 03 "
            "(0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)" % n,
            "NVRM: Xid (PCI:0008:01:00): %d, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)" % (n * 10 + 1)]
    rc = ("Xid %d (%s) reported as Nonfatal: an NVLink5 unit (named in the line) logged a non-fatal error. "
          "In NVIDIA's catalog decode of Xids 144-150 most Nonfatal statuses need no action (IGNORE) and a few "
          "predict a later Xid 48/94/95 or packet loss; the job normally keeps running. Keep it as context for "
          "any fatal NVLink Xid, Xid 45 or NCCL error on the same GPU; if Nonfatal errors repeat on one link, "
          "have the link inspected." % (n, r["mnemonic"]))
    out = [
        "# Generated by tools/xid-catalogue/gen.py from tools/xid-catalogue/xid-catalogue.tsv; edit the table, not this file.",
        "id = %s" % q(eid),
        "title = %s" % q("Xid %d: %s, non-fatal" % (n, r["description"])),
        'domain = "nvidia"', 'category = "interconnect_nvlink"', 'error_code = "XID_%d"' % n,
        'role = "symptom"', 'severity = "warning"', 'verification = "community_reported"',
        'patterns_verified = "real_log"',
        'supersedes = ["%s"]' % main_id,
        'root_cause = """\n%s\n"""' % wrap(rc),
        "patterns = [\n  %s,\n]" % q(pat),
        "examples = [\n%s\n]" % "\n".join(("  " + e) if e.startswith("#") else "  %s," % q(e) for e in ex),
        "negative_examples = [\n%s\n]" % "\n".join("  %s," % q(e) for e in negs),
        "references = [\n%s\n]" % "\n".join("  %s," % q(x) for x in (REFS_COMMON[:2] + NVLINK5_REFS)),
        "\n[[workarounds]]\ntext = %s" % q("No action for a Nonfatal NVLink5 error alone; if the same link keeps "
                                          "logging them, drain the node and have the link inspected."),
        '\n[[review]]\npart = "patterns"\nlevel = "community_reported"\nby = "%s"\nagainst = %s' % (
            BY_R2, q("Real lines in leptonai/gpud#1160, leptonai/gpud#1174 and NVIDIA/nccl#2241; the unit text comes "
                     "from GSP firmware (not in the open driver), so the column padding of GB200 lines (runs of "
                     "spaces around the unit and Fatal/Nonfatal) is accepted; the padded example is built, not a "
                     "captured line")),
        '\n[[review]]\npart = "root_cause"\nlevel = "community_reported"\nby = "%s"\nagainst = %s' % (
            BY, q("NVIDIA catalog 'XID 144-150 Decode' sheet as copied in leptonai/gpud catalog_generated.go nvlinkRules")),
        '\n[[review]]\npart = "advice"\nlevel = "community_reported"\nby = "%s"\nagainst = %s' % (
            BY, q("Same decode sheet: Non-fatal rows mostly IGNORE; INVESTIGATE_LINK_SI_AND_CABLES for BER events")),
    ]
    return ("xid-%d-%s-nonfatal.toml" % (n, slug(r["mnemonic"])), "\n".join(out) + "\n")


def wrap(text, width=110):
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w) if cur else w
    if cur:
        lines.append(cur)
    return "\n".join(lines)


NVERROR = None


def main():
    global NVERROR
    if "--extract-nverror" in sys.argv:
        extract_nverror(sys.argv[sys.argv.index("--extract-nverror") + 1])
        return
    if "--verify-xid-format" in sys.argv:
        verify_xid_format(sys.argv[sys.argv.index("--verify-xid-format") + 1])
        return
    if "--verify-nverror" in sys.argv:
        verify_nverror(sys.argv[sys.argv.index("--verify-nverror") + 1])
        return
    NVERROR = load_nverror()
    check = "--check" in sys.argv
    rows = list(csv.DictReader(open(os.path.join(HERE, "xid-catalogue.tsv"), encoding="utf-8"), delimiter="\t"))
    reals = {}
    for x in csv.DictReader(open(os.path.join(HERE, "real-examples.tsv"), encoding="utf-8"), delimiter="\t"):
        n = int(x["xid"])
        reals.setdefault(n, []).append(x["line"])
        reals.setdefault(("src", n), []).append((n, x["source"], x["line"]))
    stale = 0
    for r in rows:
        if int(r["xid"]) in EXISTING:
            continue
        for name, text in render(r, reals):
            path = os.path.join(OUT, name)
            if check:
                if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
                    print("stale:", path)
                    stale += 1
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
