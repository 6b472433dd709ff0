#!/usr/bin/env bash
# One device call: install the carried Jupyter wheels, run the GPU tests, record
# the named chapters, and execute the named notebooks live. Results go to $OUT.
# Usage (on the GPU machine, repo root): bash tools/gpu_session.sh "CHAPTERS" "TESTS" "NOTEBOOKS"
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUT/nvidia-smi.txt
chapters=${1:-}; tests=${2:-}; notebooks=${3:-}
if [ -n "$tests" ]; then
  python3 -m pytest -q -o addopts="" -p no:cacheprovider $tests 2>&1 | tail -40 | tee $OUT/tests.log
fi
if [ -n "$chapters" ]; then
  python3 -m gpulab record $chapters --out $OUT/runs 2>&1 | tee $OUT/record.log
fi
if [ -n "$notebooks" ]; then
  python3 -m pytest -q -o addopts="" -p no:cacheprovider --nbmake $notebooks 2>&1 | tail -30 | tee $OUT/notebooks.log
fi
