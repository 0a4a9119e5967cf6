"""Score every candidate line against a similarity index built from the KB only.
Writes scores-<variant>.json: {set: [ {file, kind, expect, missed, lines:[(score, code, margin)]} ]}"""
import json, sys
import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
import os
from lib import MAIN, WORK, load_kb, mask, tokens, pattern_words

VARIANTS = {
    # name: (analyzer, docs, roles)
    'w_ex':        ('word', ('ex',), None),
    'w_ex_ti':     ('word', ('ex', 'ti'), None),
    'w_ex_ti_pw':  ('word', ('ex', 'ti', 'pw'), None),
    'w_ex_ti_root':('word', ('ex', 'ti'), {'root'}),
    'c_ex':        ('char', ('ex',), None),
    'c_ex_ti':     ('char', ('ex', 'ti'), None),
    'c_ex_ti_root':('char', ('ex', 'ti'), {'root'}),
}

def build(ents, analyzer, docs, roles):
    texts, codes = [], []
    for e in ents:
        if roles and e['role'] not in roles:
            continue
        if 'ex' in docs:
            for x in e['examples']:
                texts.append(x); codes.append(e['code'])
        if 'ti' in docs:
            texts.append(e['title']); codes.append(e['code'])
        if 'pw' in docs:
            for p in e['raw_patterns']:
                w = pattern_words(p)
                if w:
                    texts.append(w); codes.append(e['code'])
    if analyzer == 'word':
        v = TfidfVectorizer(tokenizer=tokens, lowercase=False, token_pattern=None, sublinear_tf=True)
    else:
        v = TfidfVectorizer(analyzer='char_wb', ngram_range=(3, 5), preprocessor=mask, sublinear_tf=True)
    X = v.fit_transform(texts)
    ucodes = sorted(set(codes))
    ci = {c: i for i, c in enumerate(ucodes)}
    col = np.array([ci[c] for c in codes])
    return v, X, ucodes, col

def score_lines(index, lines):
    v, X, ucodes, col = index
    if not lines:
        return []
    S = (v.transform(lines) @ X.T).toarray()       # cosine (rows are l2-normalised)
    out = []
    for row in S:
        per = np.full(len(ucodes), 0.0)
        np.maximum.at(per, col, row)                # 1-NN per code
        o = np.argsort(-per)
        out.append((float(per[o[0]]), ucodes[o[0]], float(per[o[0]] - per[o[1]])))
    return out

if __name__ == '__main__':
    import os
    CAND = os.environ.get('CAND', 'cand.json'); SUF = os.environ.get('SUF', '')
    cand = json.load(open(CAND))
    name = sys.argv[1]
    an, docs, roles = VARIANTS[name]
    kbs = {}
    def kb_for(setname):
        if setname.startswith('batch') and int(setname[5:]) >= 9:
            d = f'{WORK}/kb-{setname[5:]}/kb'
        else:
            d = os.path.join(MAIN, 'kb')
        if d not in kbs:
            kbs[d] = build(load_kb(d)[0], an, docs, roles)
        return kbs[d]
    out = {}
    for s, exs in cand.items():
        idx = kb_for(s)
        out[s] = [dict(file=x['file'], kind=x['kind'], expect=x['expect'], missed=x['missed'],
                       lines=[(sc, c, m, ln) for (sc, c, m), ln in zip(score_lines(idx, x['lines'] or []), x['lines'] or [])]
                       if x['lines'] is not None else None) for x in exs]
    json.dump(out, open(f'scores-{name}{SUF}.json', 'w'))
    print(name + SUF, 'done')
