#!/usr/bin/env bash
# Gradescope autograder setup (runs once, as root, when Gradescope builds the image).
# The zip holds: setup.sh, run_autograder, autograder.py, key (your secret grading key), optional
# assignment, and the course wheel (mha_course-*.whl: the course and its grader, no solutions/).
set -euo pipefail
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv bubblewrap >/dev/null
python3 -m venv /opt/mha
# The torch the course is tested with (.ci/run pins the same; tests/test_install_targets.py checks it).
TORCH_SPEC="torch==2.13.0"
/opt/mha/bin/python -m pip install --quiet "$TORCH_SPEC" --index-url https://download.pytorch.org/whl/cpu
/opt/mha/bin/python -m pip install --quiet /autograder/source/mha_course-*.whl
# The course is installed read-only: owned by root, readable (and runnable) by everyone, writable
# by no one else, so the unprivileged user a submission runs as cannot change the grader.
chown -R root:root /opt/mha
chmod -R u+rwX,go+rX,go-w /opt/mha
# The key and the rest of source/ are root's only (the grading user must not read them).
chmod -R go-rwx /autograder/source
[ -L /autograder/source/key ] || chmod 600 /autograder/source/key 2>/dev/null || true
