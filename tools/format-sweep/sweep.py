#!/usr/bin/env python3
"""List a program's log format strings across release tags and say which ones the KB recognises.

    python3 tools/format-sweep/sweep.py --git DIR --tag v2.30.7-1 --tag v2.27.3-1 \\
        --path src --macro WARN \\
        --prefix 'node1:1234:1240 [0] {file}:{line} NCCL WARN ' --strip src/ \\
        --out /tmp/nccl-warn.tsv

What it reads, how it renders a sample line and what a row means: README.md beside this file.
Standard library only; `faultline` from `--faultline` or PATH.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# A printf conversion: flags, width, precision, length, conversion.
CONV = re.compile(r"%[-+ #0']*(\*|\d+)?(\.(\*|\d+))?(hh|h|ll|l|z|j|t|L|q)?(?P<conv>[diouxXeEfgGaAcspnm%])")
# A verb of Go's fmt: flags, width, precision, verb (no length modifiers).
GO_CONV = re.compile(r"%[-+ #0]*(\*|\d+)?(\.(\*|\d+))?(?P<conv>[vTtbcdoOqxXUeEfFgGsp%w])")
# <inttypes.h> macros that stand between literals: PRIu64 -> "lu", PRIx32 -> "x".
PRI = re.compile(r"PRI([diouxX])(8|16|32|64|MAX|PTR|LEAST\d+|FAST\d+)")
# One C string literal.
LIT = r'"(?:[^"\\\n]|\\.)*"'


# The values a `%s` is tried with: a device, an operation, an address, a suffix. None of them
# names a failure by itself (a reason such as "Connection refused" would be recognised wherever
# it is printed, and so would say nothing of the format around it).
STRINGS = ["mlx5_0", "Connect", "10.1.2.3<51234>", "_v2"]


def value(conv, string, go=False):
    """A plain sample value for one printf conversion character, `string` for `%s`; with `go`,
    Go's verbs: `%v` and `%w` as `string` (an error or a value printed whole), `%q` as `string`
    quoted, `%t` a boolean, `%T` a type."""
    if go and conv in "vwqtT":
        return {"v": string, "w": string, "q": f'"{string}"', "t": "true", "T": "*fs.PathError"}[conv]
    return {
        "%": "%",
        "d": "3",
        "i": "3",
        "o": "7",
        "u": "7",
        "x": "1f",
        "X": "1F",
        "c": "c",
        "p": "0x7f3a",
        "s": string,
        "n": "",
        # glibc's %m: strerror(errno); the most common errno's text.
        "m": "No such file or directory",
    }.get(conv, "1.5")


# Slurm's own conversions (src/common/log.c): a job, step or address argument printed whole; a
# doubled percent sign before the `p` is not a conversion.
SLURM_CONV = re.compile(r"(?<!%)%p([AIJsSdD])")
SLURM_VALUES = {
    "A": "10.1.2.3:6818",
    "I": "JobId=7",
    "J": "JobId=7",
    "s": "StepId=7.0",
    "S": "JobId=7 StepId=7.0",
    "d": "{}",
    "D": "data_type(0x7f3a)",
}


def render(fmt, string, slurm=False, go=False):
    """The line a format string prints with plain values, each `%s` as `string`; with `slurm`,
    Slurm's `%pJ` and kin first; with `go`, Go's verbs (`%v`, `%q`, `%w`, ...)."""
    if slurm:
        fmt = SLURM_CONV.sub(lambda m: SLURM_VALUES[m.group(1)], fmt)
    return (GO_CONV if go else CONV).sub(lambda m: value(m.group("conv"), string, go), fmt)


def unescape(body):
    """A C literal's body as text (simple escapes; others kept as written)."""
    table = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r", "0": ""}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(0)), body)


# A string or character literal (kept) or a comment (blanked): C and C++ comments, not inside
# literals (`'"'` is a character, not the start of a string).
CODE = re.compile(r'("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)+\')|//[^\n]*|/\*.*?\*/', re.S)


def uncommented(text):
    """`text` with its comments blanked, newlines kept (a commented-out call prints nothing)."""
    return CODE.sub(lambda m: m.group(1) or "\n" * m.group(0).count("\n"), text)


# One argument before the format: a name, a member access or a call with simple arguments.
ARG = r"[^,()\"]*(?:\([^()]*\)[^,()\"]*)*"


def call_head(macro):
    """The regex of a call up to its format argument: `WARN` is `WARN(`; a macro whose format is
    not its first argument names the arguments before it, `*` for any one (`fprintf(stderr,`,
    `verbs_err(*,`)."""
    if "(" not in macro:
        return re.escape(macro) + r"\s*\("
    name, rest = macro.split("(", 1)
    args = [a.strip() for a in rest.split(",") if a.strip()]
    head = re.escape(name) + r"\s*\("
    for a in args:
        head += r"\s*" + (ARG if a == "*" else re.escape(a)) + r"\s*,"
    return head


def calls(text, macros):
    """(line number, format string) of each call of one of `macros` with a literal format."""
    text = uncommented(text)
    head = r"\b(?:" + "|".join(call_head(m) for m in macros) + r")\s*"
    # Literals, optionally with PRI macros between them, across lines.
    # A macro that stands for a literal (`PFX "..."`) may come first: its text is the prefix's.
    seq = re.compile(
        head + r"((?:[A-Z][A-Z0-9_]*\s*)?" + LIT + r"(?:\s*(?:" + LIT + r"|PRI\w+))*)"
    )
    for m in seq.finditer(text):
        parts = re.findall(LIT + r"|PRI\w+", m.group(1))
        fmt = ""
        for p in parts:
            if p.startswith('"'):
                fmt += unescape(p[1:-1])
            else:
                pm = PRI.match(p)
                fmt += ("l" + pm.group(1)) if pm else ""
        yield text.count("\n", 0, m.start()) + 1, fmt


def git(gitdir, *args):
    return subprocess.run(
        ["git", "-C", gitdir, *args], capture_output=True, text=True, errors="replace", check=True
    ).stdout


def sweep(args):
    rows = {}  # format -> {"place": (file, line), "tags": [...]}
    for tag in args.tag:
        files = git(args.git, "ls-tree", "-r", "--name-only", tag, "--", *args.path).split()
        files = [f for f in files if f.endswith(tuple(args.ext))]
        for f in files:
            text = git(args.git, "show", f"{tag}:{f}")
            if not any(m.split("(", 1)[0] in text for m in args.macro):
                continue
            for line, fmt in calls(text, args.macro):
                if not fmt.strip():
                    continue
                row = rows.setdefault(fmt, {"place": (f, line), "tags": []})
                if tag not in row["tags"]:
                    row["tags"].append(tag)
    return rows


def samples_of(args, fmt, place):
    """The sample lines of one format string: one per `%s` value (one when it has no `%s`)."""
    f, line = place
    if args.strip and f.startswith(args.strip):
        f = f[len(args.strip):]
    prefix = (
        args.prefix.replace("{file}", f)
        .replace("{base}", os.path.basename(f))
        .replace("{line}", str(line))
    )
    out = []
    # The conversions a string fills: `%s`, and in Go `%v`, `%q` and `%w` too.
    strings = r"%[-+ #\d.*]*[" + ("svqw" if args.go else "s") + "]"
    for string in STRINGS if re.search(strings, fmt) else STRINGS[:1]:
        # A format that prints several lines is read as its first non-empty one.
        first = next(
            (p for p in render(fmt, string, args.slurm, args.go).split("\n") if p.strip()), ""
        )
        if prefix + first not in out:
            out.append(prefix + first)
    return out


def matches(faultline, kb, lines):
    """The match events of `faultline scan` over `lines` (one log line each), in output order.

    `faultline` is the binary (on PATH when None), `kb` the KB directory (the built-in KB when
    None). Shared with pysweep.py and frameworks_gpu.py."""
    exe = faultline or shutil.which("faultline")
    if not exe:
        sys.exit(f"{os.path.basename(sys.argv[0])}: faultline not found (give --faultline)")
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as tmp:
        for s in lines:
            tmp.write(s + "\n")
    cmd = [exe, "scan", "--no-summary", "--no-incidents", "--no-unknown", "--format", "json"]
    if kb:
        cmd += ["--kb", kb]
    out = subprocess.run(cmd + [tmp.name], capture_output=True, text=True, check=True).stdout
    os.unlink(tmp.name)
    return [e for e in map(json.loads, out.splitlines()) if e.get("type") == "match"]


def scan(args, samples):
    """{sample: {(role, error code)}} of the samples that matched."""
    seen = {}
    for e in matches(args.faultline, args.kb, samples):
        seen.setdefault(e["line"], set()).add((e["role"], e["error_code"]))
    return seen


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--git", required=True, help="a git repository (a bare mirror is enough)")
    p.add_argument("--tag", action="append", required=True, help="a release tag (repeat)")
    p.add_argument("--path", action="append", required=True, help="a path under which to read")
    p.add_argument(
        "--macro",
        action="append",
        required=True,
        help="a logging call (repeat); arguments before the format as in 'fprintf(stderr,' or "
        "'verbs_err(*,' (* for any one)",
    )
    p.add_argument("--ext", action="append", default=None, help="file endings (.c .cc .h ...)")
    p.add_argument(
        "--prefix", default="", help="what the program prints before the message ({file} {base} {line})"
    )
    p.add_argument("--strip", default="", help="leading path part the program does not print")
    p.add_argument(
        "--slurm",
        action="store_true",
        help="read Slurm's %%pA %%pI %%pJ %%ps %%pS %%pd %%pD conversions as log.c prints them",
    )
    p.add_argument(
        "--go",
        action="store_true",
        help="read Go's fmt verbs (%%v %%q %%w %%t %%T); .go files unless --ext is given",
    )
    p.add_argument("--kb", help="KB directory (the built-in KB when absent)")
    p.add_argument("--faultline", help="the faultline binary")
    p.add_argument("--out", help="TSV of every format string")
    args = p.parse_args()
    args.ext = args.ext or ([".go"] if args.go else [".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".cuh"])
    rows = sweep(args)
    samples = {fmt: samples_of(args, fmt, r["place"]) for fmt, r in rows.items()}
    seen = scan(args, sorted({s for ss in samples.values() for s in ss}))
    known = {}
    for fmt, ss in samples.items():
        hits = set().union(*(seen.get(s, set()) for s in ss))
        known[fmt] = bool({r for r, _ in hits} & {"root", "cascade"})
        rows[fmt]["hits"] = sorted(hits)
    for tag in args.tag:
        fmts = [f for f, r in rows.items() if tag in r["tags"]]
        k = sum(known[f] for f in fmts)
        share = f"{100 * k / len(fmts):.1f}%" if fmts else "-"
        print(f"{tag}: {len(fmts)} format strings, {k} recognised as root or cascade ({share})")
    changed = sum(1 for r in rows.values() if len(r["tags"]) < len(args.tag))
    print(f"all tags: {len(rows)} distinct format strings, {changed} not in every tag")
    if args.out:
        with open(args.out, "w") as o:
            o.write("place\ttags\trecognised\tmatches\tformat\tsample\n")
            for fmt, r in sorted(rows.items(), key=lambda kv: kv[1]["place"]):
                hits = ",".join(f"{c}:{role}" for role, c in r["hits"])
                o.write(
                    "\t".join(
                        [
                            f"{r['place'][0]}:{r['place'][1]}",
                            " ".join(r["tags"]),
                            "yes" if known[fmt] else "no",
                            hits or "-",
                            fmt.replace("\n", "\\n").replace("\t", "\\t"),
                            samples[fmt][0].replace("\t", "\\t"),
                        ]
                    )
                    + "\n"
                )


if __name__ == "__main__":
    main()
