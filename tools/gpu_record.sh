#!/usr/bin/env bash
# One device call that records chapters one after another, packing what is recorded so far
# into $OUT/runs.tgz after each (so a call cut off by its time limit still returns the
# chapters it finished; a second call adds to the same runs.tgz: the caller removes $OUT/runs).
# Usage: bash tools/gpu_record.sh CHAPTER...
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee $OUT/nvidia-smi.txt
for chapter in "$@"; do
  start=$SECONDS
  python3 -m gpulab record "$chapter" --out $OUT/runs >> $OUT/record.log 2>&1
  echo "$chapter: rc=$? in $((SECONDS - start)) s" | tee -a $OUT/record.summary
  tar czf $OUT/runs.tgz.part -C $OUT runs && mv $OUT/runs.tgz.part $OUT/runs.tgz
done

