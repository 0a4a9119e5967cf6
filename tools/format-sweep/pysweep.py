#!/usr/bin/env python3
"""List a Python program's failure messages across releases and say which ones the KB recognises.

The Python twin of sweep.py (round kb47): it reads the `.py` files of each release from a git
mirror (`--git DIR --tag TAG`) or from a wheel (`--wheel FILE`, labelled with its version), parses
them with `ast` and takes every

  * `raise X(<message>)` (the sample line is `X: <message>`, as a traceback's last line prints it),
  * `assert <cond>, <message>` (`AssertionError: <message>`),
  * `logger.error|exception|critical|fatal|warning|warn(<message>)` and `warnings.warn(<message>)`
    (the sample line is the message alone, as the Hugging Face loggers print it by default),

whose message is a string literal, an f-string, a `%` format, a `.format()` call or a `+`
concatenation of these. Each placeholder is filled once with `3` and once with `foo`, and a
message is recognised when either sample matches an entry other than the generic `python/*`
exception entries as root or cascade. `--topic REGEX` keeps the messages a multi-GPU run meets
(a sweep of argument typos is not the point); the TSV keeps every row with a `topic` column.

Standard library only; `faultline` from `--faultline` or PATH.
"""
import argparse
import ast
import io
import os
import re
import zipfile

from sweep import git, matches

LOGGERS = {"error", "exception", "critical", "fatal", "warning", "warn", "warning_once", "error_once"}
FILLS = ("3", "foo")


def files_of(args, source):
    """(path, text) of every .py file of one release under the --path prefixes."""
    kind, where, tag = source
    if kind == "git":
        names = git(where, "ls-tree", "-r", "--name-only", tag, "--", *args.path).split()
        for n in names:
            if n.endswith(".py"):
                yield n, git(where, "show", f"{tag}:{n}")
    else:
        with zipfile.ZipFile(where) as z:
            for n in z.namelist():
                if n.endswith(".py") and any(n.startswith(p) for p in args.path):
                    yield n, z.read(n).decode("utf-8", "replace")


def render(node, fill):
    """The text a message expression prints, placeholders filled with `fill`; None if unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            else:
                out.append(fill)
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = render(node.left, fill), render(node.right, fill)
        if a is None and b is None:
            return None
        return (a if a is not None else fill) + (b if b is not None else fill)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        a = render(node.left, fill)
        if a is None:
            return None
        return re.sub(r"%(\([^)]*\))?[-+ #0-9.*]*[sdrfigxXeu]", fill, a).replace("%%", "%")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        a = render(node.func.value, fill)
        if a is None:
            return None
        return re.sub(r"\{[^{}]*\}", fill, a)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return render(node.args[0], fill)
    return None


def name_of(func):
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def messages(text):
    """(line, kind, exception-or-call, [samples]) of one file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        kind = exc = msg = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            exc = name_of(node.exc.func)
            kind, msg = "raise", node.exc.args[0]
        elif isinstance(node, ast.Assert) and node.msg is not None:
            kind, exc, msg = "assert", "AssertionError", node.msg
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.args
            and (
                (node.func.attr in LOGGERS and "log" in ast.unparse(node.func.value).lower())
                or (node.func.attr == "warn" and ast.unparse(node.func.value) == "warnings")
            )
        ):
            kind, exc, msg = "log", node.func.attr, node.args[0]
        if kind is None or exc is None:
            continue
        out = []
        for fill in FILLS:
            m = render(msg, fill)
            if m is None:
                break
            first = next((p.strip() for p in m.split("\n") if p.strip()), "")
            if not first:
                break
            s = f"{exc}: {first}" if kind != "log" else first
            if s not in out:
                out.append(s)
        if out:
            yield node.lineno, kind, exc, out


def scan(args, samples):
    """{sample: {(role, entry id)}} of the samples that matched."""
    seen = {}
    for e in matches(args.faultline, args.kb, [s.replace("\r", " ") for s in samples]):
        seen.setdefault(e["line"], set()).add((e["role"], e["kb_id"]))
    return seen


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--git", help="a git repository (a bare mirror is enough)")
    p.add_argument("--tag", action="append", default=[], help="a release tag (repeat; with --git)")
    p.add_argument("--wheel", action="append", default=[], help="a wheel file (repeat)")
    p.add_argument("--path", action="append", required=True, help="a path prefix under which to read")
    p.add_argument("--topic", help="regex (case-insensitive) a message must match to count")
    p.add_argument("--kinds", default="raise,assert,log", help="which kinds to count")
    p.add_argument("--kb", help="KB directory (the built-in KB when absent)")
    p.add_argument("--faultline", help="the faultline binary")
    p.add_argument("--out", help="TSV of every message")
    args = p.parse_args()
    sources = [("git", args.git, t) for t in args.tag]
    sources += [("wheel", w, re.sub(r"^[^-]+-([^-]+)-.*$", r"\1", os.path.basename(w))) for w in args.wheel]
    kinds = set(args.kinds.split(","))
    topic = re.compile(args.topic, re.I) if args.topic else None
    rows = {}  # (kind, exc, first sample) -> row
    for src in sources:
        label = src[2]
        for path, text in files_of(args, src):
            for line, kind, exc, samples in messages(text):
                if kind not in kinds:
                    continue
                row = rows.setdefault(
                    (kind, samples[0]), {"place": f"{path}:{line}", "samples": samples, "tags": []}
                )
                if label not in row["tags"]:
                    row["tags"].append(label)
    seen = scan(args, sorted({s for r in rows.values() for s in r["samples"]}))
    per = {src[2]: [0, 0, 0, 0] for src in sources}  # all, recognised, topic, topic recognised
    out = io.StringIO()
    out.write("place\ttags\ttopic\trecognised\tmatches\tsample\n")
    for (kind, first), r in sorted(rows.items(), key=lambda kv: kv[1]["place"]):
        hits = set().union(*(seen.get(s, set()) for s in r["samples"]))
        good = sorted(
            i for role, i in hits if role in ("root", "cascade") and not i.startswith("python/")
        )
        on = bool(topic.search(" ".join(r["samples"]))) if topic else True
        for t in r["tags"]:
            per[t][0] += 1
            per[t][1] += bool(good)
            per[t][2] += on
            per[t][3] += on and bool(good)
        out.write(
            f"{r['place']}\t{','.join(r['tags'])}\t{'yes' if on else 'no'}\t{'yes' if good else 'no'}\t"
            f"{' '.join(sorted(set(good)))}\t{first}\n"
        )
    if args.out:
        with open(args.out, "w") as f:
            f.write(out.getvalue())
    for t, (a, g, o, og) in per.items():
        print(f"{t}\tmessages {a}\trecognised {g}\ttopic {o}\ttopic recognised {og}")


if __name__ == "__main__":
    main()
