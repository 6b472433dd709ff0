"""The lab's exceptions: each says what was expected and what was found."""
from __future__ import annotations


class GpulabError(Exception):
    """Base class of every error gpulab raises on purpose."""


class ShownPlainly:
    """An error whose message says all a student needs (the kernel's file and line, what went
    wrong): IPython shows the message alone (``_render_traceback_``), not a traceback through
    the lab's internals, as the exercise checks' errors already are; ``sys.last_value`` keeps
    the exception (and ``%debug`` its traceback) for anyone who wants them."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


class NoGPUError(GpulabError, RuntimeError):
    """A GPU was required (live timing, recording) but none is usable here."""


class KernelCompileError(ShownPlainly, GpulabError):
    """A kernel source did not compile.

    ``path`` and ``line`` point at the first error in the user's file;
    ``log`` holds the compiler's full output.
    """

    def __init__(self, message: str, *, path: str, line: int | None, log: str):
        super().__init__(message)
        self.path = path
        self.line = line
        self.log = log


class KernelArgumentError(GpulabError, TypeError):
    """A launch's arguments do not match the kernel's signature or limits."""


class KernelLaunchError(ShownPlainly, GpulabError, RuntimeError):
    """A kernel failed while running (CPU backend traps: divergent barrier,
    out-of-bounds access, ...; GPU launch failures)."""


class CheckFailed(ShownPlainly, GpulabError, AssertionError):
    """A kernel's output disagrees with the reference beyond the tolerance."""


class RecordedRunError(GpulabError, FileNotFoundError):
    """A recorded run in labdata/ is missing or malformed."""


class OtherLabError(GpulabError, RuntimeError):
    """The lab being worked in is not the one whose ``gpulab`` Python imported (another copy,
    an editable install from elsewhere): its checks would test the other copy's kernels."""
