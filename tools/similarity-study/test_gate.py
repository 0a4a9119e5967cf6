import re
import os
from lib import MAIN, looks_like_error
src=open(os.path.join(MAIN, 'src/templates/filter.rs')).read()
t=src[src.index('#[cfg(test)]'):]
yes=t[t.index('let yes'):t.index('for l in yes')]; no=t[t.index('let no'):t.index('for l in no')]
import ast
def lits(s): return [ast.literal_eval('"'+m+'"') for m in re.findall(r'"((?:[^"\\]|\\.)*)"',s)]
bad=[l for l in lits(yes) if not looks_like_error(l)]+[l for l in lits(no) if looks_like_error(l)]
print(len(lits(yes)),len(lits(no)),'mismatches',bad)
print(looks_like_error("ERROR UserWarning escalated: cannot continue"))
