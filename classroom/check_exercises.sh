#!/usr/bin/env bash
# The check step of autograde.yml (in a student repository: .github/check_exercises.sh).
#
#   bash check_exercises.sh OUT_DIR NOTEBOOK [NOTEBOOK ...]
#
# Runs `mha-course check` on each notebook (its console output is shown and appended to
# OUT_DIR/check.txt), copies the notebooks into OUT_DIR/submissions/student/ for the scoring
# step, and exits non-zero when any item of any notebook failed (or a check could not run).
set -uo pipefail   # pipefail: the exit status of `mha-course check`, not of `tee`

if [ "$#" -lt 2 ]; then
  echo "usage: $0 OUT_DIR NOTEBOOK [NOTEBOOK ...]" >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/submissions/student" || exit 2
status=0
for nb in "$@"; do
  if [ ! -f "$nb" ]; then
    echo "no such notebook: $nb" | tee -a "$out/check.txt"
    status=1
    continue
  fi
  cp "$nb" "$out/submissions/student/"
  mha-course check "$nb" 2>&1 | tee -a "$out/check.txt" || status=1
done
echo "all items passed: $([ "$status" -eq 0 ] && echo yes || echo no)"
exit "$status"
