#!/usr/bin/env bash
# One device call: install the carried Jupyter wheels, run the GPU tests, record
# the named chapters, and execute the named notebooks live. Results go to $OUT,
# as at most a handful of files (the device returns only a few): logs, and the
# recorded runs packed into runs.tgz.
# Usage (on the GPU machine, repo root):
#   bash tools/gpu_session.sh "CHAPTERS" "TESTS" "NOTEBOOKS" [NOTEBOOK_TIMEOUT_S]
#   bash tools/gpu_session.sh check [SECONDS]
#   bash tools/gpu_session.sh tests [SECONDS]     (the GPU tests alone, no notebooks)
#   bash tools/gpu_session.sh quick CHAPTER...     (each chapter's record once, --quick: its GPU paths run)
# "check" is the closing check of every session that touches GPU code, in one call
# (carry .whl; about 7 minutes): the timing tests alone on the idle GPU, then every
# other test (4 workers) beside every notebook of the book executed live in parallel (their timings
# smoke runs: GPULAB_SMOKE_TIMING, the card not settled, numbers not for reading),
# each scanned for stderr, errors, "nan" and raw dicts (tools/run_notebooks.py). Each notebook
# may hold 9% of the GPU's memory (CUPY_GPU_MEMORY_LIMIT), so batches over its share are
# skipped with the reason, as on a smaller GPU; gpu_record.sh measures them, one chapter at a time.
# Beside them, every notebook as it is on the CPU backend, its glued numbers compared (as_is.log).
# $OUT gets tests.log, as_is.log, notebooks/summary.txt and the executed notebooks (notebooks.tgz).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a $OUT/nvidia-smi.txt
# The test files with GPU paths (the others test the CPU backend, the site and grading, which CI runs).
gpu_tests="alexnet alexnet_winograd basics check convpool datasheet device exercises fcnet kernels lenet
           measuring multigpu prose ptx runs timeline training hopper hopper_dtypes hopper_conv sass convpool_f32 hopper_cluster
           alexnet_wgmma32 baselines hopper_fp8 cpu_fp8 cpu_backend"
if [ "${1:-}" = tests ]; then
  # The GPU tests alone (no notebooks): the timing tests on the idle GPU, then the rest, 4 workers.
  python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_timing_gpu.py > $OUT/tests.log 2>&1
  tail -3 $OUT/tests.log
  timeout ${2:-400} python3 -m pytest -q -o addopts="-ra" -p no:cacheprovider -n 4 --dist loadfile \
    $(for t in $gpu_tests; do echo tests/test_$t.py; done) >> $OUT/tests.log 2>&1
  echo "tests: rc=$?"; tail -15 $OUT/tests.log
  exit 0
fi
if [ "${1:-}" = quick ]; then
  # Each named chapter's record run once quickly (--quick: fewer sizes, a smoke test, not for
  # committing), to see its GPU paths run (a chapter ported on a machine without a GPU, say).
  shift
  for chapter in "$@"; do
    start=$SECONDS
    python3 -m gpulab record "$chapter" --quick --repeats 5 --out $OUT/quick >> $OUT/quick.log 2>&1
    echo "$chapter --quick: rc=$? in $((SECONDS - start)) s" | tee -a $OUT/quick.summary
  done
  grep -E "Error|Traceback" $OUT/quick.log | head -20
  exit 0
fi
if [ "${1:-}" = check ]; then
  limit=${2:-420}
  python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_timing_gpu.py > $OUT/tests.log 2>&1
  tail -3 $OUT/tests.log
  # Eight notebooks share one GPU: their timings are smoke runs (timing.SMOKE_ENV), not for reading.
  GPULAB_SMOKE_TIMING=1 python3 tools/run_notebooks.py $OUT/notebooks book/*/*.ipynb --jobs 8 --gpu-share 9% --deadline $((limit - SECONDS - 15)) \
    > $OUT/notebooks.log 2>&1 &
  # Every notebook as it is, solutions in place, on the CPU backend (the GPU hidden), its glued numbers
  # compared with tests/fixtures/glued (conftest.py, marker as_is): CI executes only the student versions.
  CUDA_VISIBLE_DEVICES= timeout $((limit - SECONDS - 10)) python3 -m pytest -q -o addopts="-ra" -p no:cacheprovider \
    -n 2 -m as_is book/ > $OUT/as_is.log 2>&1 &
  timeout $((limit - SECONDS - 10)) python3 -m pytest -q -o addopts="-ra" -p no:cacheprovider -n 4 \
    --dist loadfile $(for t in $gpu_tests; do echo tests/test_$t.py; done) >> $OUT/tests.log 2>&1
  echo "tests: rc=$?"; tail -15 $OUT/tests.log
  wait
  echo "notebooks as they are (CPU backend, glued numbers):"; tail -4 $OUT/as_is.log
  cat $OUT/notebooks/summary.txt
  tar czf $OUT/notebooks.tgz -C $OUT notebooks && rm -rf $OUT/notebooks/*.ipynb
  exit 0
fi
chapters=${1:-}; tests=${2:-}; notebooks=${3:-}; nb_timeout=${4:-300}
if [ -n "$chapters" ]; then
  bash tools/gpu_record.sh $chapters      # one chapter after another, packed into runs.tgz
  rm -rf $OUT/runs
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
