"""Ceiling: how many missed excerpts could any fallback recover from these candidate lines?"""
import json, sys
from lib import load_kb
from evaluate import agg, predict
v = sys.argv[1]
S = json.load(open(f'scores-{v}.json'))
tot = dict(missed=0, nocand=0, code_unknown=0, nearest_ok_any_line=0)
for k in range(9, 21):
    codes = {e['code'] for e in load_kb(f'kb-{k}/kb')[0]}
    for x in S[f'batch{k}']:
        if x['kind'] != 'failures' or not x['missed']: continue
        tot['missed'] += 1
        if not any(c in codes for c in x['expect']): tot['code_unknown'] += 1
        if not x['lines']: tot['nocand'] += 1
        if any(c in x['expect'] for _, c, _, _ in x['lines']): tot['nearest_ok_any_line'] += 1
print(v, tot)
for t in [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]:
    for m in [0.0, 0.1]:
        a = agg(S, range(9, 21), t, m)
        print(f"  t={t} m={m}: 9-20 correct {a['correct']} wrong {a['wrong']} abst {a['abstained']} hfires {a['hfires']}")
