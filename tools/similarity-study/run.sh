#!/usr/bin/env bash
# Reproduces the similarity-fallback study (README.md): for each blind batch 9..20, the KB it
# was scored blind with (commits.txt), its signature misses, and what a nearest-KB-example
# fallback would have added. Usage: tools/similarity-study/run.sh [WORK_DIR]
# Needs a release build (target/release/faultline, or FAULTLINE_BIN), python3 and the package
# registry (numpy, scikit-learn into WORK_DIR/venv). Reads ../shared/corpus/loghub when present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mkdir -p "${1:-/tmp/similarity-study}" && cd "${1:-/tmp/similarity-study}" && pwd)
bin=${FAULTLINE_BIN:-$root/target/release/faultline}
mkdir -p "$work/ev"
[ -x "$work/venv/bin/python" ] || python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet numpy scikit-learn
while read -r k commit; do
  rm -rf "$work/kb-$k" && mkdir -p "$work/kb-$k"
  git -C "$root" archive "$commit" kb | tar -x -C "$work/kb-$k"
  "$bin" eval --kb "$work/kb-$k/kb" --format json "$root/tests/corpus/blind/batch$k" > "$work/ev/b$k.json"
done < "$here/commits.txt"
export SIMSTUDY_ROOT=$root SIMSTUDY_WORK=$work PYTHONPATH=$here
cd "$work"
py=$work/venv/bin/python
$py "$here/test_gate.py"
$py "$here/prep.py"
variants="w_ex w_ex_ti w_ex_ti_pw w_ex_ti_root c_ex c_ex_ti c_ex_ti_root"
for v in $variants; do $py "$here/score.py" "$v"; done
# shellcheck disable=SC2086
$py "$here/evaluate.py" $variants
$py "$here/ceiling.py" c_ex
$py "$here/culprit.py"
