"""Candidate lines per excerpt: gate-passing lines that no pattern of the (old) KB matches.
Writes cand.json: {set: [ {file, kind, expect, missed, lines:[...]} ]}."""
import json, glob, os, sys
from multiprocessing import Pool
from lib import *
# --no-gate: every unmatched line is a candidate, not only those the error gate keeps
NOGATE = '--no-gate' in sys.argv[1:]
OUTF = os.path.join(WORK, 'cand-nogate.json' if NOGATE else 'cand.json')
B = os.path.join(MAIN, 'tests', 'corpus', 'blind')

def cands(ents, body):
    out = []
    for ln in body:
        if ln.strip() and (NOGATE or looks_like_error(ln)) and not any_pattern_matches(ents, ln):
            out.append(ln)
    return out

def do_batch(k):
    kbdir = f'{WORK}/kb-{k}/kb' if k >= 9 else os.path.join(MAIN, 'kb')
    ents, bad = load_kb(kbdir)
    res = []
    missed = {}
    if k >= 9:
        ev = json.loads(open(f'{WORK}/ev/b{k}.json').readline())
        missed = {o['file']: (not o['detected']) for o in ev['outcomes'] if o['label'] != 'healthy'}
    kinds = ['healthy'] + (['failures'] if k >= 9 else [])
    for kind in kinds:
        for f in sorted(glob.glob(f'{B}/batch{k}/{kind}/*.log')):
            rel = f'{kind}/' + os.path.basename(f)
            hdr, expect, body = parse_excerpt(f)
            m = missed.get(rel, False)
            if kind == 'failures' and not m:
                res.append(dict(file=rel, kind=kind, expect=expect, missed=False, lines=None))
                continue
            res.append(dict(file=rel, kind=kind, expect=expect, missed=m, lines=cands(ents, body), nlines=len(body)))
    return f'batch{k}', res, bad, len(ents)

def do_real(_):
    ents, bad = load_kb(os.path.join(MAIN, 'kb'))
    res = []
    for f in sorted(glob.glob(os.path.join(MAIN, 'tests/corpus/real/healthy/*.log'))):
        hdr, expect, body = parse_excerpt(f)
        res.append(dict(file='healthy/' + os.path.basename(f), kind='healthy', expect=expect, missed=False, lines=cands(ents, body), nlines=len(body)))
    return 'real', res, bad, len(ents)

def do_loghub(f):
    ents, bad = load_kb(os.path.join(MAIN, 'kb'))
    body = open(f, encoding='utf-8', errors='replace').read().split('\n')
    body = [l for l in body if l.strip()]
    return 'loghub:' + os.path.basename(f), [dict(file=os.path.basename(f), kind='loghub', expect=[], missed=False, lines=cands(ents, body), nlines=len(body))], bad, len(ents)

if __name__ == '__main__':
    jobs = [(do_batch, k) for k in range(1, 21)] + [(do_real, 0)] + [(do_loghub, f) for f in sorted(glob.glob(os.path.join(SHARED, 'corpus/loghub/*_2k.log')))]
    with Pool(os.cpu_count()) as p:
        rs = p.starmap(lambda_f := None or (lambda fn, a: fn(a)), []) if False else None
        rs = [p.apply_async(fn, (a,)) for fn, a in jobs]
        out = {}
        for r in rs:
            name, res, bad, n = r.get()
            out[name] = res
            print(name, 'entries', n, 'uncompilable patterns', bad, 'excerpts', len(res),
                  'cand lines', sum(len(x['lines'] or []) for x in res), flush=True)
    json.dump(out, open(OUTF, 'w'))
