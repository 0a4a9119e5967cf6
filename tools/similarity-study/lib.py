"""Similarity-fallback study helpers: KB loading, the error gate (port of
src/templates/filter.rs looks_like_error), excerpt parsing, masking, TF-IDF index."""
import glob, os, re, tomllib, json
import numpy as np

MAIN = os.environ.get('SIMSTUDY_ROOT', os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..')))
WORK = os.environ.get('SIMSTUDY_WORK', '.')
SHARED = os.environ.get('SIMSTUDY_SHARED', os.path.join(MAIN, '..', 'shared'))

# ---------------------------------------------------------------- KB
def _fix_pat(p):
    # Python 3.11 rejects global flags not at the start: hoist (?i) to the front.
    if '(?i)' in p and not p.startswith('(?i)'):
        p = '(?i)' + p.replace('(?i)', '')
    return p

def load_kb(kbdir):
    ents, bad = [], 0
    for f in sorted(glob.glob(os.path.join(kbdir, '**', '*.toml'), recursive=True)):
        try:
            d = tomllib.load(open(f, 'rb'))
        except Exception:
            continue
        if 'error_code' not in d or 'patterns' not in d:
            continue
        pats = []
        for p in d['patterns']:
            if not isinstance(p, str):
                p = p.get('regex') or p.get('pattern') or ''
            try:
                pats.append(re.compile(_fix_pat(p)))
            except re.error:
                bad += 1
        ents.append(dict(id=d.get('id', f), code=d['error_code'], title=d.get('title', ''),
                         role=d.get('role', 'root'), examples=list(d.get('examples', [])),
                         root_cause=d.get('root_cause', ''), raw_patterns=[p if isinstance(p, str) else '' for p in d['patterns']],
                         pats=pats, whole_line=bool(d.get('whole_line'))))
    return ents, bad

def any_pattern_matches(ents, line):
    for e in ents:
        for p in e['pats']:
            m = p.search(line)
            if m:
                if e['whole_line'] and m.group(0).strip() != line.strip().strip('*_ '):
                    continue
                return True
    return False

# ---------------------------------------------------------------- excerpts
def parse_excerpt(path):
    hdr, body, inbody = {}, [], False
    for ln in open(path, encoding='utf-8', errors='replace').read().split('\n'):
        if not inbody:
            if ln.strip() == '---':
                inbody = True
                continue
            if ':' in ln:
                k, v = ln.split(':', 1)
                hdr[k.strip()] = v.strip()
        else:
            body.append(ln)
    expect = [c.strip() for c in hdr.get('expect', '').split(',') if c.strip()]
    return hdr, expect, body

# ---------------------------------------------------------------- gate (port of filter.rs)
LEVEL = {'ERROR', 'ERR', 'CRITICAL', 'CRIT', 'FATAL', 'SEVERE', 'PANIC', 'EMERG'}
ERRW = {'error', 'errors', 'fail', 'fails', 'failed', 'failure', 'failures', 'fatal', 'abort', 'aborts',
        'aborted', 'aborting', 'exception', 'exceptions', 'panic', 'panicked', 'segfault', 'crashed'}
SIGS = {'SIGSEGV', 'SIGABRT', 'SIGBUS', 'SIGFPE', 'SIGILL'}

def _alpha(c): return (65 <= c <= 90) or (97 <= c <= 122)
def _digit(c): return 48 <= c <= 57
def _alnum(c): return _alpha(c) or _digit(c)
def _upper(c): return 65 <= c <= 90
def _lower(c): return 97 <= c <= 122

def _glog_at(b, i):
    return (len(b) >= i + 8 and b[i] in (ord('E'), ord('F')) and all(_digit(c) for c in b[i+1:i+5])
            and b[i+5] == 32 and _digit(b[i+6]) and _digit(b[i+7]))

def _glog_prefix(b):
    if _glog_at(b, 0):
        return True
    for i in range(min(len(b), 48)):
        if b[i] in (ord(']'), ord(':')) and i + 1 < len(b):
            j = i + 1
            while j < len(b) and b[j] in (ord(':'), 32):
                j += 1
            if _glog_at(b, j):
                return True
    return False

def _swci(h, n): return len(h) >= len(n) and h[:len(n)].lower() == n.lower()

def _camel_error(w):
    if len(w) < 6:
        return False
    for k, c in enumerate(w):
        if c not in (ord('E'), ord('F')):
            continue
        for seg in (b'Error', b'Exception', b'Failure', b'Failed', b'Fault'):
            if seg[0] != c or not w[k:].startswith(seg):
                continue
            start_ok = k == 0 or _lower(w[k-1])
            end = k + len(seg)
            end_ok = end == len(w) or _upper(w[end])
            whole = k == 0 and end == len(w)
            if start_ok and end_ok and not whole:
                neg = k >= 2 and w[:k].lower() == b'no'
                if not neg:
                    return True
    return False

def _gap_short(b, s):
    k, n = s, 0
    while k > 0 and b[k-1] in (32, ord('-')):
        k -= 1; n += 1
    return n <= 2

def _zero_before(b, s):
    k = s
    while k > 0 and b[k-1] == 32:
        k -= 1
    if k == s:
        return False
    end = k
    while k > 0 and (_digit(b[k-1]) or b[k-1] == ord('.')):
        k -= 1
    if k == end:
        return False
    num = b[k:end]
    standalone = k == 0 or not _alnum(b[k-1])
    return standalone and all(c in (48, 46) for c in num) and (48 in num)

def _in_key_or_path(b, s, e):
    ok = lambda c: _alnum(c) or c in (ord('_'), ord('.'), ord('/'), ord('-'))
    ks = s
    while ks > 0 and ok(b[ks-1]):
        ks -= 1
    ke = e
    while ke < len(b) and ok(b[ke]):
        ke += 1
    tok = b[ks:ke]
    if ord('/') in tok:
        return True
    if ord('_') not in tok:
        return False
    k = ke
    while k < len(b) and b[k] in (ord('"'), ord("'")):
        k += 1
    if k < len(b) and b[k] == ord('='):
        return True
    if k < len(b) and b[k] == ord(':'):
        j = k + 1
        while j < len(b) and b[j] == 32:
            j += 1
        return j < len(b) and (_digit(b[j]) or b[j] == ord('-'))
    return False

def _null_after(b, e):
    k = e
    while k < len(b) and b[k] in (ord('"'), ord("'"), 32):
        k += 1
    if k >= len(b) or b[k] not in (ord('='), ord(':')):
        return False
    k += 1
    while k < len(b) and b[k] in (32, ord('"'), ord("'")):
        k += 1
    rest = b[k:]
    if not rest:
        return False
    j = 0
    while j < len(rest) and rest[j] in (48, 46):
        j += 1
    if j > 0 and rest[0] == 48 and (j == len(rest) or not _alnum(rest[j])):
        return True
    for v in (b'none', b'null', b'nil', b'<nil>', b'false', b'""', b'[]', b'{}'):
        if _swci(rest, v) and (len(rest) == len(v) or not _alnum(rest[len(v)])):
            return True
    return False

def _benign(b, s, e, prev):
    if prev in (b'no', b'without', b'zero', b'never', b'non', b'not') and _gap_short(b, s):
        return True
    if _zero_before(b, s):
        return True
    if len(b) > e + 1 and b[e] == ord('-'):
        rest = b[e+1:]
        if _swci(rest, b'free') or _swci(rest, b'safe') or _swci(rest, b'tolerant'):
            return True
    if _in_key_or_path(b, s, e):
        return True
    k = e
    while k < len(b) and b[k] == 32:
        k += 1
    if k > e:
        rest = b[k:]
        for w in (b'handling', b'handler', b'rate', b'rates'):
            if _swci(rest, w) and (len(rest) == len(w) or not _alnum(rest[len(w)])):
                return True
    return _null_after(b, e)

def _exit_word(lw, p1, p2):
    return lw in (b'exitcode', b'returncode') or (
        lw in (b'code', b'status') and (p1 in (b'exit', b'return') or
        (p1 == b'with' and p2 in (b'exited', b'failed', b'terminated', b'finished'))))

def _nonzero_after(b, e):
    k = e
    while k < len(b) and b[k] in (32, ord(':'), ord('='), ord('"'), ord("'"), ord('('), ord('[')):
        k += 1
    if k < len(b) and b[k] in (ord('-'), ord('+')):
        k += 1
    s = k
    while k < len(b) and _digit(b[k]):
        k += 1
    return s < k and any(c != 48 for c in b[s:k])

def _next_exitish(b, e):
    k = e
    while k < len(b) and not _alpha(b[k]):
        if k > e + 3:
            return False
        k += 1
    rest = b[k:]
    return _swci(rest, b'exit') or _swci(rest, b'status') or _swci(rest, b'return')

def looks_like_error(line):
    b = line.encode('utf-8', 'replace')[:4096]
    if _glog_prefix(b):
        return True
    strong = weak = warncls = False
    p1 = p2 = b''
    i = 0
    n = len(b)
    while i < n:
        if not _alpha(b[i]):
            i += 1
            continue
        s = i
        while i < n and _alpha(b[i]):
            i += 1
        w = b[s:i]
        lw = w[:12].lower()
        if (w.decode() in LEVEL and not _in_key_or_path(b, s, i)) or w == b'Traceback':
            strong = True
        elif len(w) > 7 and w.endswith(b'Warning'):
            warncls = True
        elif (len(w) <= 12 and lw.decode() in ERRW) or _camel_error(w):
            if not _benign(b, s, i, p1):
                weak = True
        elif (len(w) <= 12 and w.decode() in SIGS) or (lw == b'fault' and p1 == b'segmentation') \
                or (lw == b'dumped' and p1 == b'core'):
            weak = True
        elif _exit_word(lw, p1, p2):
            if _nonzero_after(b, i):
                weak = True
        elif (lw == b'nonzero' or (lw == b'zero' and p1 == b'non' and s > 0 and b[s-1] == ord('-'))) \
                and (p1 == b'returned' or p2 == b'returned' or _next_exitish(b, i)):
            weak = True
        p2, p1 = p1, lw
    if strong:
        return True
    if warncls:
        return False
    return weak

# ---------------------------------------------------------------- masking / tokens
_MASKS = [
    (re.compile(r'\x1b\[[0-9;]*m'), ' '),
    (re.compile(r'https?://\S+'), ' url '),
    (re.compile(r'\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-9a-fA-F])?\b'), ' pciaddr '),
    (re.compile(r'\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b'), ' ipaddr '),
    (re.compile(r'\b(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}\b'), ' macaddr '),
    (re.compile(r'\b0x[0-9a-fA-F]+\b'), ' hexnum '),
    (re.compile(r'\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b'), ' hexnum '),
]
_PATH = re.compile(r'(?:[A-Za-z]:)?(?:\.{0,2}/)?(?:[\w.@+-]+/)+([\w.@+-]*)')
_NUM = re.compile(r'\d+')
_TOK = re.compile(r'[a-z][a-z0-9_]*')

def mask(line):
    s = line
    for rx, rep in _MASKS:
        s = rx.sub(rep, s)
    s = _PATH.sub(lambda m: ' path ' + m.group(1) + ' ', s)   # keep the basename
    s = _NUM.sub(' ', s)                                       # numbers dropped
    return s.lower()

def tokens(line):
    return [t for t in _TOK.findall(mask(line)) if len(t) > 1]

# ---------------------------------------------------------------- pattern literal words
def pattern_words(p):
    # crude: drop named groups' names, classes, escapes; keep alphabetic runs of >= 3 chars
    p = re.sub(r'\(\?P<\w+>', '(', p)
    p = re.sub(r'\[[^\]]*\]', ' ', p)
    p = re.sub(r'\\[a-zA-Z]', ' ', p)
    p = re.sub(r'\(\?[a-z]+\)', ' ', p)
    return ' '.join(w for w in re.findall(r'[A-Za-z][A-Za-z0-9_]{2,}', p))
