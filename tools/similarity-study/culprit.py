"""Why the fallback cannot see most misses: the culprit line of each missed excerpt --
does it pass the gate, is it matched by some (wrong) pattern, and where would the
similarity index put it (oracle line choice)."""
import json, collections
from lib import *
from score import build, score_lines
B = os.path.join(MAIN, 'tests', 'corpus', 'blind')
c = collections.Counter(); orc = collections.Counter()
for k in range(9, 21):
    ents = load_kb(f'kb-{k}/kb')[0]; codes = {e['code'] for e in ents}
    idx = build(ents, 'char', ('ex',), None)
    ev = json.loads(open(f'ev/b{k}.json').readline())
    for o in ev['outcomes']:
        if o['label'] == 'healthy' or o['detected']: continue
        hdr, expect, body = parse_excerpt(f'{B}/batch{k}/{o["file"]}')
        cul = hdr.get('culprit', '')
        lines = [l for l in body if cul and cul in l]
        if not lines: c['culprit line not found'] += 1; continue
        l = lines[0]
        known = any(x in codes for x in expect)
        g = looks_like_error(l); pm = any_pattern_matches(ents, l)
        c[('known' if known else 'unknown-code', 'gate' if g else 'no-gate', 'pattern-hit' if pm else 'no-pattern')] += 1
        if known:
            sc, code, mg = score_lines(idx, [l])[0]
            ok = code in expect
            b = 'ok' if ok else 'wrong'
            orc[(b, '>=0.6' if sc >= 0.6 else ('>=0.4' if sc >= 0.4 else '<0.4'))] += 1
for k, v in sorted(c.items(), key=lambda x: -x[1]): print(v, k)
print('oracle culprit line, char index, known codes:')
for k, v in sorted(orc.items()): print(v, k)
