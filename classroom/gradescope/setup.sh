#!/usr/bin/env bash
# Gradescope autograder setup (runs once when Gradescope builds the image).
# The zip holds: setup.sh, run_autograder, seed, and the course wheel (mha_course-*.whl).
set -euo pipefail
apt-get update -qq && apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -m venv /opt/mha
/opt/mha/bin/python -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu
/opt/mha/bin/python -m pip install --quiet /autograder/source/mha_course-*.whl
