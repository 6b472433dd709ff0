"""A student's broken kernel never takes the Python process down (issue #12).

Every CPU-backend launch runs in a worker process on copies of its arrays in
shared memory: overruns are caught (bounds checking is on by default), a
worker that crashes or aborts is a KernelLaunchError, a launch that never ends
is stopped by the time limit, and an interrupt stops it too.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from gpulab import cpu, ladder
from gpulab.errors import KernelLaunchError
from gpulab.paths import KERNELS as BOOK_KERNELS
from gpulab.workloads import fcnet

TESTS = Path(__file__).parent / "kernels"
rng = np.random.default_rng(2026)


@pytest.fixture(scope="module")
def traps():
    source = (TESTS / "traps.cu").read_text()
    return cpu.compile_module(source, filename="tests/kernels/traps.cu")


def worker_processes() -> list[int]:
    """This process's child processes (live or not yet reaped)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(entry.name))
    return found


def unguarded_exercise(folder: Path) -> fcnet.Step:
    """fcnet's Exercise 1 answered without its `if (row < M && col < N)` guard,
    the commonest student bug: it used to abort Python (glibc: "free(): invalid
    next size" or "corrupted double-linked list")."""
    source = (BOOK_KERNELS / fcnet.EXERCISE.file).read_text()
    guarded = source.split("// BEGIN SOLUTION")[1].split("// END SOLUTION")[0]
    assert "if (row < M && col < N) {" in guarded
    body = guarded.replace("if (row < M && col < N) {", "{")
    path = folder / "16_exercise_unguarded.cu"
    path.write_text(source.replace(guarded, body))
    return dataclasses.replace(fcnet.CHAPTER.step(16), file=str(path))


@pytest.mark.solutions
def test_unguarded_exercise_is_an_error_naming_block_thread_and_array(tmp_path):
    step = unguarded_exercise(tmp_path)
    with pytest.raises(KernelLaunchError) as info:
        fcnet.CHAPTER.check("cpu", steps=[step])
    message = str(info.value)
    for part in ("kernel 'matmul_relu'", "block (", "thread (", "out-of-bounds", "past the end of the array"):
        assert part in message, message
    assert any(f"argument '{name}'" in message for name in "ABC"), message
    # The process is alive and the correct answer still checks.
    table = fcnet.CHAPTER.check("cpu", steps=[fcnet.CHAPTER.step(16)])
    assert (table["status"] == "ok").all(), table


@pytest.mark.solutions
def test_unguarded_exercise_without_bounds_checking_cannot_harm_python(tmp_path):
    step = unguarded_exercise(tmp_path)
    with cpu.checking(bounds=False):
        try:
            table = fcnet.CHAPTER.check("cpu", steps=[step])
        except KernelLaunchError as exc:
            assert "matmul_relu" in str(exc)
        else:
            assert (table["status"] == "FAILED").any(), table  # an overrun shows as a failed check at worst
    assert (fcnet.CHAPTER.check("cpu", steps=[fcnet.CHAPTER.step(16)])["status"] == "ok").all()


def test_a_thread_that_overflows_its_stack_is_named_and_python_lives_on(traps):
    # The guard page under each thread's stack (a guard marker where Linux has them, else a
    # PROT_NONE page): the first write past the stack faults there and is named as what it is.
    y = np.zeros(64, np.float32)
    with pytest.raises(KernelLaunchError) as info:
        traps.get_function("deep_local_array")((2, 1, 1), (64, 1, 1), (np.int32(48 * 1024), y))
    message = str(info.value)
    assert "kernel 'deep_local_array'" in message and "stack overflow" in message, message
    assert "128 KiB" in message, message
    np.testing.assert_array_equal(y, 0)              # nothing came back from the failed launch
    # The process lives on and the module still launches.
    seen = np.zeros(1, np.uint32)
    traps.get_function("count_launches")((1, 1, 1), (32, 1, 1), (seen,))
    assert seen[0] >= 1


@pytest.mark.parametrize("bounds", [True, False])
@pytest.mark.parametrize("after", [1, 0])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_write_just_outside_every_array_argument(traps, which, after, bounds):
    n = 1_004   # 16-byte multiple: the end sits flush against the guard page
    arrays = [np.zeros(n, np.float32) for _ in range(3)]
    sentinel = [a.copy() for a in arrays]
    fn = traps.get_function("overrun_one")
    if not bounds:
        # The copies have no guards, but they are not Python's memory: the
        # process lives on, whatever the kernel overwrote.
        with cpu.checking(bounds=False):
            try:
                fn((8, 1, 1), (128, 1, 1), (np.int32(n), np.int32(which), np.int32(after), *arrays))
            except KernelLaunchError as exc:
                assert "overrun_one" in str(exc)
        assert arrays[which][:n].sum() >= n
        return
    with pytest.raises(KernelLaunchError) as info:
        fn((8, 1, 1), (128, 1, 1), (np.int32(n), np.int32(which), np.int32(after), *arrays))
    message, name = str(info.value), "abc"[which]
    assert f"argument '{name}'" in message, message
    if after:
        assert f"{name}[{n}]" in message and "past the end" in message, message
        assert "block (7,0,0), thread (107,0,0)" in message, message
    else:
        assert f"{name}[-1]" in message and "before the start" in message, message
    for i in range(3):
        if i != which:
            np.testing.assert_array_equal(arrays[i], sentinel[i])


def test_write_into_the_alignment_slack_is_found_after_the_launch(traps):
    n = 1_003   # copies start 16-byte aligned, so 4 bytes of slack follow c[1002]
    arrays = [np.zeros(n, np.float32) for _ in range(3)]
    with pytest.raises(KernelLaunchError) as info:
        traps.get_function("overrun_one")((8, 1, 1), (128, 1, 1),
                                          (np.int32(n), np.int32(2), np.int32(1), *arrays))
    message = str(info.value)
    assert "past the end of argument 'c': element c[1003] was written" in message, message
    assert "found after the launch" in message, message


def test_a_worker_that_aborts_is_an_error_naming_block_and_thread(traps):
    x = np.zeros(64, np.float32)
    with pytest.raises(KernelLaunchError) as info:
        traps.get_function("free_argument")((3, 1, 1), (64, 1, 1), (x,))
    message = str(info.value)
    for part in ("kernel 'free_argument'", "SIGABRT", "block (1,0,0) (thread (5,0,0) running)", "unharmed"):
        assert part in message, message
    assert worker_processes() == []


def test_a_loop_that_never_ends_is_stopped_by_the_time_limit(traps, monkeypatch):
    x = np.zeros(5, np.float32)
    # The clock's backstop far away: on a machine this loaded (CI's neighbours), a thread given a
    # sixth of a core would not have computed 1 s in 6 s, and the backstop would stop it first.
    monkeypatch.setattr(cpu, "WAIT_FACTOR", 100)
    before = cpu.launch_costs()
    with cpu.checking(time_limit_s=1.0), pytest.raises(KernelLaunchError) as info:
        traps.get_function("spin")((3, 1, 1), (32, 1, 1), (x,))
    spent = cpu.launch_costs() - before
    message = str(info.value)
    for part in ("kernel 'spin'", "did not finish within the time limit of 1 s (CPU time of its busiest thread)",
                 "block (", "thread (0,0,0) running", "0 of 3 blocks had finished", "time_limit_s"):
        assert part in message, message
    # The limit counts CPU time, however busy the machine: the stopped worker had computed for
    # at least the limit, and was stopped soon after its busiest thread reached it (each of its
    # threads one second, give or take /proc's resolution), not by the backstop 16 s later.
    assert spent.launches == 1
    assert 1.0 <= spent.cpu_s < 1.0 * cpu._worker_count() + 1.0, spent
    assert worker_processes() == []
    # What the loop had written reached the array, as on a GPU, and Python goes on.
    assert x[0] == 0 and x[1] > 0
    y = np.zeros(1, np.uint32)
    traps.get_function("count_launches")((1, 1, 1), (1, 1, 1), (y,))
    assert y[0] >= 1


def test_a_launch_that_waits_without_computing_is_stopped_by_the_clock():
    waits = cpu.compile_module((TESTS / "waits.cu").read_text(), filename="tests/kernels/waits.cu")
    x = np.zeros(1, np.float32)
    before = cpu.launch_costs()
    with cpu.checking(time_limit_s=0.25), pytest.raises(KernelLaunchError) as info:
        waits.get_function("wait_forever")((1, 1, 1), (1, 1, 1), (x,))
    spent = cpu.launch_costs() - before
    message = str(info.value)
    for part in ("kernel 'wait_forever'", f"did not finish within {0.25 * cpu.WAIT_FACTOR:g} s on the clock",
                 "time limit of 0.25 s", "it was waiting", "time_limit_s"):
        assert part in message, message
    assert x[0] >= 1                                     # it ran, and then slept
    assert spent.launches == 1 and spent.cpu_s < 0.25, spent   # far from the CPU-time limit
    assert worker_processes() == []


def test_an_interrupt_stops_a_running_launch(traps):
    x = np.zeros(5, np.float32)
    # Python's own handler, as in a terminal or a Jupyter kernel (another test may have set another).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    before = cpu.launch_costs()
    timer.start()
    try:
        with cpu.checking(time_limit_s=60), pytest.raises(KeyboardInterrupt) as info:
            traps.get_function("spin")((2, 1, 1), (32, 1, 1), (x,))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "kernel 'spin'" in notes and "was interrupted" in notes, notes
    # The interrupt stopped it, not the time limit: its worker computed far less than the limit.
    spent = cpu.launch_costs() - before
    assert spent.launches == 1 and spent.cpu_s < 30, spent
    assert worker_processes() == []


def test_device_variables_outlive_the_worker_process(traps):
    seen = np.zeros(1, np.uint32)
    before = int(traps.get_global("launches_seen").view(np.uint32)[0])
    for i in range(3):
        traps.get_function("count_launches")((1, 1, 1), (1, 1, 1), (seen,))
        assert seen[0] == before + i + 1
    assert int(traps.get_global("launches_seen").view(np.uint32)[0]) == before + 3


def test_checking_settings_nest_and_are_validated():
    assert cpu.current_checking() == cpu.Checking(True, "in_order", 0, cpu.DEFAULT_TIME_LIMIT_S)
    with cpu.checking(schedule="reverse"):
        with cpu.checking(time_limit_s=None):
            assert cpu.current_checking() == cpu.Checking(True, "reverse", 0, None)
        with cpu.checking(bounds=False):
            assert cpu.current_checking().bounds is False
            assert cpu.current_checking().schedule == "reverse"
    for bad in (0, -1, "10", True):
        with pytest.raises(ValueError, match="time_limit_s"):
            with cpu.checking(time_limit_s=bad):
                pass


#: The most that running each launch in its own process (fork, copies of the
#: arrays, copying back) may add to the CPU time of the chapters' launches at
#: their check sizes; measured: about 5% for fcnet (134 launches).
OVERHEAD_MARGIN = 0.20


@pytest.mark.slow
def test_isolation_costs_the_chapters_little():
    before = cpu.launch_costs()
    table = fcnet.CHAPTER.check("cpu")
    costs = cpu.launch_costs() - before
    assert (table["status"] == "ok").all(), table
    assert costs.launches >= 2 * len(fcnet.CHAPTER.steps)
    assert 0 < costs.kernel_cpu_s <= costs.cpu_s
    assert costs.overhead <= OVERHEAD_MARGIN, costs


@pytest.mark.solutions
def test_correct_kernels_give_identical_results_with_and_without_bounds():
    case = fcnet.problem.Vectors(1_000)
    inputs = case.inputs(7)
    for step in [fcnet.CHAPTER.step(n) for n in (1, 3, 8, 16)]:
        checked = ladder.run(step, case, inputs, "cpu")
        with cpu.checking(bounds=False):
            unchecked = ladder.run(step, case, inputs, "cpu")
        np.testing.assert_array_equal(checked, unchecked)
        assert np.isfinite(checked).all()
