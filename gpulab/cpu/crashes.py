"""How a process that ran student code died, in words that do not guess.

A signal has several possible causes; the messages name the signal and list
the likely ones, instead of blaming one (a SIGABRT is not always a corrupted
heap, a SIGILL not always a bad jump).  Used for the CPU backend's worker
processes, and by anything else that runs kernels in a child process.
"""
from __future__ import annotations

import os
import signal

__all__ = ["signal_causes", "death_cause", "worker_died"]

_CAUSES = {
    signal.SIGABRT: (
        "the process aborted itself, which the C library does when it finds its heap corrupted (a write "
        "through a wild pointer or far outside an array), when free() gets memory malloc() did not return "
        "or memory freed twice, and when abort() is called or a C++ exception is not caught"),
    signal.SIGILL: (
        "an illegal instruction: g++ compiles code whose behaviour it can prove undefined, such as an "
        "integer division by a zero it can see at compile time, into one (a GPU computes an unspecified "
        "value there instead); a jump through a corrupted pointer or return address can land on one too"),
    signal.SIGSEGV: (
        "an invalid memory access outside the kernel's threads (in the C library or the CPU backend's "
        "runtime), for instance after the kernel overwrote memory it does not own"),
    signal.SIGBUS: "a bus error: an access to memory that no longer exists or is misaligned for the instruction",
    signal.SIGFPE: "an arithmetic fault (an integer division by zero or overflow) outside the kernel's threads",
    signal.SIGKILL: "killed from outside, often by the system when memory runs out",
    signal.SIGALRM: "its backstop timer ran out (gpulab.cpu.WAIT_FACTOR times the time limit plus 10 s, on the clock)",
}


def signal_causes(signum: int) -> str:
    """``"SIGILL: an illegal instruction: ..."``: the signal's name and its
    likely causes, none singled out (just the name for a signal without a
    list)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    causes = _CAUSES.get(signum)
    return f"{name}: {causes}" if causes else name


def _status(wait_status: int | None) -> tuple[str, str]:
    """What ended a process, from its ``os.waitpid`` status (-1 or None:
    unknown): in a few words, and the causes (a sentence, or "")."""
    if wait_status is None or wait_status < 0:
        return "how is unknown", ""
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        causes = signal_causes(signum)
        name = causes.split(":", 1)[0]
        return name, (causes + "." if ":" in causes else "")
    if os.WIFEXITED(wait_status):
        return f"exit status {os.WEXITSTATUS(wait_status)}", ""
    return "how is unknown", ""


def death_cause(wait_status: int | None) -> str:
    """What ended a process, in a few words ("SIGABRT", "exit status 3")."""
    return _status(wait_status)[0]


def worker_died(kernel: str, wait_status: int | None, where: str, bounds_checked: bool) -> str:
    """The message for a CPU-backend worker process that died running ``kernel``."""
    what, causes = _status(wait_status)
    hint = "" if bounds_checked else (
        " Bounds checking was off: run the kernel with bounds checking on (the default) to have an access "
        "outside an array or shared memory named.")
    return (f"kernel '{kernel}': the CPU backend's worker process running it died ({what}); {where}. "
            f"Your Python session is unharmed. {causes}{hint}").rstrip()
