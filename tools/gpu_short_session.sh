#!/usr/bin/env bash
# One device call for a session short of device time: the timing tests on the idle GPU, then
# the named chapters recorded (packed into $OUT/runs.tgz), then every GPU test file (4 workers)
# until the deadline, then, with any time left, the chapters named in LATER recorded too.
# Usage: bash tools/gpu_short_session.sh SECONDS "CHAPTERS" ["LATER"]     (carry .whl)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
limit=$1; chapters=$2; later=${3:-}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,temperature.gpu --format=csv | tee $OUT/nvidia-smi.txt
python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_timing_gpu.py > $OUT/timing_tests.log 2>&1
echo "timing tests: rc=$?"; tail -4 $OUT/timing_tests.log
python3 -c "import json; from gpulab import device, timing; print(json.dumps(device.conditions(timing.describe_method()), indent=1))" \
  > $OUT/conditions.json 2>&1
[ -n "$chapters" ] && timeout 200 bash tools/gpu_record.sh $chapters
gpu_tests="alexnet alexnet_winograd basics check convpool datasheet device exercises fcnet kernels lenet
           measuring multigpu prose ptx runs timeline training hopper hopper_dtypes hopper_conv sass convpool_f32 hopper_cluster
           alexnet_wgmma32"
timeout $((limit - SECONDS - 20)) python3 -m pytest -q -o addopts="-ra" -p no:cacheprovider -n 4 --dist loadfile \
  $(for t in $gpu_tests; do echo tests/test_$t.py; done) > $OUT/tests.log 2>&1
echo "tests: rc=$? at $SECONDS s"; tail -25 $OUT/tests.log
if [ -n "$later" ] && [ $((limit - SECONDS)) -gt 60 ]; then
  timeout $((limit - SECONDS - 10)) bash tools/gpu_record.sh $later
fi
rm -rf $OUT/runs
cat $OUT/record.summary 2>/dev/null; grep -E "cross-check|Error" $OUT/record.log 2>/dev/null | tail -30
