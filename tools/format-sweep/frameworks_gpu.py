#!/usr/bin/env python3
"""Scan the hand-written failure lines of frameworks-gpu-lines.tsv and say which the KB recognises.

    python3 tools/format-sweep/frameworks_gpu.py --faultline target/release/faultline --kb kb [--tsv OUT]

Python and Cython programs (TensorFlow's Python layer, CuPy) and C++ messages assembled with StrCat or
streams (TensorFlow's StreamExecutor, PaddlePaddle's enforce.h) are not format strings that sweep.py can
read, so frameworks-gpu-lines.tsv holds one line per message, written by hand from the literals at the
tags it names. A line counts as recognised when an entry other than the generic python/* ones matches it
with role root or cascade. Prints one count row per program and tag, and (with --tsv) every line's codes.
Standard library only.
"""
import argparse
import collections
import os
import sys

from sweep import matches

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faultline", default="faultline")
    ap.add_argument("--kb", default="kb")
    ap.add_argument("--lines", default=os.path.join(HERE, "frameworks-gpu-lines.tsv"))
    ap.add_argument("--tsv")
    a = ap.parse_args()
    rows = []
    for raw in open(a.lines, encoding="utf-8"):
        raw = raw.rstrip("\n")
        if not raw or raw.startswith("#"):
            continue
        prog, tags, where, line = raw.split("\t", 3)
        rows.append((prog, tags.split(), where, line))
    hits = collections.defaultdict(list)
    for m in matches(a.faultline, a.kb, [r[3].replace("\n", " ") for r in rows]):
        hits[m["source"]["line"]].append((m["kb_id"], m["error_code"], m["role"]))
    count = collections.Counter()
    total = collections.Counter()
    table = []
    for i, (prog, tags, where, line) in enumerate(rows, 1):
        ok = any(r in ("root", "cascade") and not k.startswith("python/") for k, _, r in hits[i])
        for t in ["all"] + tags:
            total[(prog, t)] += 1
            count[(prog, t)] += ok
        codes = ",".join(sorted({"%s:%s" % (c, r) for _, c, r in hits[i]})) or "-"
        table.append("\t".join([prog, " ".join(tags), "yes" if ok else "no", codes, where, line]))
    for key in sorted(total):
        print("%s\t%s\t%d/%d" % (key[0], key[1], count[key], total[key]))
    if a.tsv:
        with open(a.tsv, "w", encoding="utf-8") as f:
            f.write("program\ttags\trecognised\tcodes\twhere\tline\n")
            f.write("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
