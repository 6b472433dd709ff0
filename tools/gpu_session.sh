#!/usr/bin/env bash
# One device call: install the carried Jupyter wheels, run the GPU tests, record
# the named chapters, and execute the named notebooks live. Results go to $OUT,
# as at most a handful of files (the device returns only a few): logs, and the
# recorded runs packed into runs.tgz.
# Usage (on the GPU machine, repo root):
#   bash tools/gpu_session.sh "CHAPTERS" "TESTS" "NOTEBOOKS" [NOTEBOOK_TIMEOUT_S]
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a $OUT/nvidia-smi.txt
chapters=${1:-}; tests=${2:-}; notebooks=${3:-}; nb_timeout=${4:-300}
if [ -n "$chapters" ]; then
  bash tools/gpu_record.sh $chapters      # one chapter after another, packed into runs.tgz
fi
if [ -n "$tests" ]; then
  python3 -m pytest -q -o addopts="" -p no:cacheprovider $tests > $OUT/tests.log 2>&1
  tail -15 $OUT/tests.log
fi
if [ -n "$notebooks" ]; then
  for nb in $notebooks; do
    start=$SECONDS
    python3 -m pytest -q -o addopts="" -p no:cacheprovider --nbmake --nbmake-timeout=$nb_timeout $nb >> $OUT/notebooks.log 2>&1
    echo "$nb: rc=$? in $((SECONDS - start)) s" | tee -a $OUT/notebooks.summary
  done
fi
