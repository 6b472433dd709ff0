"""``python -m gpulab.workloads.alexnet profile-target``: the child run Nsight Compute profiles
(:func:`gpulab.workloads.alexnet.profile.profile_table` starts it)."""
import sys

from .profile import _profile_target

if sys.argv[1:] == ["profile-target"]:
    _profile_target()
else:
    print("usage: python -m gpulab.workloads.alexnet profile-target  (the child run ncu profiles)")
