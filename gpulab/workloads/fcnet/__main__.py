"""``python -m gpulab.workloads.fcnet --profile-driver [--case CASE]``: the child run Nsight
Compute profiles (:func:`gpulab.workloads.fcnet.profile.profile_steps` starts it)."""
import sys

from .profile import main

sys.exit(main())
