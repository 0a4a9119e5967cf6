"""What the enumeration generators share: reading a table and writing an entry's generated block.

A table is a TSV file whose comment lines start with `#`; its header is its first line that is
not a comment, or a comment line `# name<TAB>...` (signals.tsv keeps its header as a comment).
Every row must have as many cells as the header. An entry is written through a temporary file and
`os.replace`, so an interrupted run never leaves a half-written entry. Python 3.8+, standard
library only.
"""
import json
import os
import re
import sys


def read_tsv(path):
    """The rows of the table at `path`, each a dict from header name to cell."""
    rows, header = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line.startswith("# name\t") and header is None:
                header = line[2:].split("\t")
                continue
            if line.startswith("#"):
                continue
            cells = line.split("\t")
            if header is None:
                header = cells
                continue
            if len(cells) != len(header):
                sys.exit(f"{path}: {len(cells)} cells, header has {len(header)}: {line!r}")
            rows.append(dict(zip(header, cells)))
    return rows


def alt(items):
    """A regex alternation of `items` in order, duplicates dropped; a single item stays bare."""
    items = list(dict.fromkeys(items))
    return items[0] if len(items) == 1 else "(?:" + "|".join(items) + ")"


def replace_block(text, array, items, path, render, begin, end):
    """`text` with the lines between `begin` and `end` inside its `array = [` ... `]` replaced by
    one `render(item),` line per item (the block goes last in the array when it had none)."""
    lines = text.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith(array + " = ["))
    except StopIteration:
        sys.exit(f"{path}: no '{array} = [' line")
    close = next(i for i in range(start + 1, len(lines)) if lines[i] == "]")
    body = lines[start + 1:close]
    b = next((i for i, l in enumerate(body) if l.strip() == begin), None)
    if b is not None:
        e = next(i for i in range(b, len(body)) if body[i].strip() == end)
        del body[b:e + 1]
    body += ["  " + begin] + ["  " + render(s) + "," for s in items] + ["  " + end]
    lines[start + 1:close] = body
    return "\n".join(lines)


def write_entry(path, new):
    """Write `new` to the entry at `path` through a temporary file."""
    tmp = path + ".gen-tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)


def check_and_kb(argv, default_kb):
    """`--check` and `--kb DIR` of a generator's command line: (check, the KB directory)."""
    kb = default_kb
    if "--kb" in argv[1:]:
        kb = os.path.abspath(argv[argv.index("--kb") + 1])
    return "--check" in argv[1:], kb


def sync_entries(rows, kb, check, name, blocks, script, begin, end):
    """Writes (or with `check` only compares) the generated blocks of every entry a row maps to.

    `rows` are a table's rows with `kb_entry` and `error_code` cells (`-` maps to none), `name`
    says which cell names a row in messages, and `blocks(entry, rows_of_entry)` gives the entry's
    `[(array, items, render)]` or None to leave it alone. An entry whose code differs from a row's,
    a missing entry and (with `check`) a stale block are reported on stderr; returns the exit
    status (0 when all is current)."""
    by = {}
    for r in rows:
        if r["kb_entry"] != "-":
            by.setdefault(r["kb_entry"], []).append(r)
    root = os.path.dirname(os.path.abspath(kb))
    stale = []
    for entry, mine in by.items():
        path = os.path.join(kb, entry + ".toml")
        if not os.path.exists(path):
            stale.append(f"{entry}: missing (kb_entry of {', '.join(r[name] for r in mine)})")
            continue
        with open(path, encoding="utf-8") as f:
            old = f.read()
        code = re.search(r'(?m)^error_code = "([^"]+)"', old).group(1)
        for r in mine:
            if r["error_code"] != code:
                stale.append(f"{entry}: error_code {code}, but {r[name]}'s row says {r['error_code']}")
        parts = blocks(entry, mine)
        if parts is None:
            continue
        new = old
        for array, items, render in parts:
            new = replace_block(new, array, items, path, render, begin, end)
        if new == old:
            continue
        if check:
            stale.append(f"{entry}: generated block out of date (run tools/enumerations/{script})")
        else:
            write_entry(path, new)
            print(f"wrote {os.path.relpath(path, root)}")
    if stale:
        print("\n".join(stale), file=sys.stderr)
        return 1
    if check:
        print(f"ok: {len(by)} entries up to date")
    return 0


def toml_str(s):
    """A TOML string for `s`: a literal string when it can be one, else a basic string."""
    if "'" not in s and "\n" not in s:
        return "'" + s + "'"
    return json.dumps(s, ensure_ascii=False)


def entry_blocks(patterns, examples, negatives):
    """The three generated blocks of an entry, as `sync_entries`' `blocks` returns them."""
    dump = lambda s: json.dumps(s, ensure_ascii=False)
    return [("patterns", patterns, toml_str), ("examples", examples, dump), ("negative_examples", negatives, dump)]


def check_unique(rows, name, allowed):
    """Exits unless every row's `unique` cell is one of `allowed`."""
    for r in rows:
        if r["unique"] not in allowed:
            sys.exit(f"{r[name]}: unique must be {', '.join(allowed[:-1])} or {allowed[-1]}, not {r['unique']!r}")

def sync_from_plan(argv, default_kb, read_rows, build, name, script, begin, end):
    """The whole run of a generator whose `build(rows, kb)` returns {entry: (patterns, examples,
    negatives)}: write (or, with --check, compare) each planned entry's generated blocks."""
    check, kb = check_and_kb(argv, default_kb)
    rows = read_rows()
    plan = build(rows, kb)

    def blocks(entry, _rows):
        if entry not in plan:
            return None
        return entry_blocks(*plan[entry])

    return sync_entries(rows, kb, check, name, blocks, script, begin, end)


def hand_written(text, array, begin, end):
    """The lines of the TOML array `array` outside its generated block (from `begin` to `end`)."""
    m = re.search(r"(?ms)^" + re.escape(array) + r" = \[\s*\n(.*?)^\]", text)
    body = m.group(1) if m else ""
    b = body.find(begin)
    if b >= 0:
        body = body[:body.rfind("\n", 0, b) + 1] + body[body.index("\n", body.find(end)) + 1:]
    return body
