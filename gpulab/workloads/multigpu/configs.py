"""The launch configurations the recorded run sweeps, and the names its rows carry: the modes of
the two-GPU step (:data:`MODES`, :func:`variant`), the bucketed step's launch configurations
(:class:`Overlap`; the sweep's :data:`OVERLAPS`, :data:`NCCL_SWEEP`), the plain step's forms
(:data:`PLAIN_FORMS`) and NCCL's settings (:data:`NCCL_SETTINGS`). Data: :mod:`.gpustep` runs a
configuration on a GPU, :mod:`.workers` sweeps them, :mod:`.views` reads the rows they name.
"""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("plain", "bucketed", "compute only")
#: Call sites of the peer update in one step (its flag slots): the plain step's one, or one per W1 bucket.
PEER_SLOTS = 8
#: One GPU's step with W1's gradient in the forward kernel, then the small gradients and the update.
ONE_GPU_FORWARD = "1 GPU, gradient in the forward kernel then update (CUDA graph)"
#: Variant names of the recorded rows, for ``p`` GPUs.
def variant(mode: str, p: int) -> str:
    names = {"plain": "one all-reduce", "bucketed": "bucketed, overlapped", "compute only": "compute only",
             "plain eager": "one all-reduce, eager", "bucketed eager": "bucketed, overlapped, eager"}
    return f"{p} GPUs, {names[mode]}"


@dataclass(frozen=True)
class Overlap:
    """How the bucketed step is launched: ``buckets`` of W1 (cut at equal work,
    rarest words first), the scatter's grid (``blocks_per_sm`` blocks per SM
    in a grid-stride loop, leaving the rest of each SM to NCCL's and the
    update's blocks; None: one block per document), and whether the all-reduces
    and updates run at the device's highest stream priority (in a graph: with
    node priorities). ``rare_share``: the rarest words' bucket holds this share
    of the batch's non-zeros (None: 1 / buckets, equal work; see
    :meth:`~.replicas.Layout.buckets`). ``overlapped`` False: the same buckets,
    all-reduces and launches, but every all-reduce waits for the whole scatter
    (a measurement of what splitting costs without the overlap, never the
    step the run keeps). ``lean``: the step on the caller's stream and one
    communication stream only (see :meth:`.gpustep.GpuStep.lean_step`): two
    cross-stream dependencies per step instead of about eight; not
    overlapped, everything on the caller's stream, none. ``spare_sms``: the
    scatter's grid is ``blocks_per_sm`` blocks on each SM but that many (one
    block per SM: the block scheduler places a grid smaller than the SM count
    one block per SM, so ``spare_sms`` SMs stay empty for NCCL's blocks, up
    to 640 threads each, one per channel), from the second bucket on: the
    first is scattered before any all-reduce, on one block per document).
    ``comm_first`` (lean, overlapped): the all-reduces run on the caller's
    stream, straight after the first bucket's scatter, and the later buckets'
    scatters on a second stream (the small gradients in the first bucket's launch),
    so NCCL's kernel is launched first and its blocks take their SMs before
    the scatter's fill them (see :meth:`.gpustep.GpuStep._comm_first`). ``in_forward``
    (lean, overlapped, gradient form): the first bucket's gradient formed in the
    forward kernel (``kernels/multigpu/05_forward_and_first_bucket.cu``), so its
    all-reduce starts when the forward pass ends (see
    :meth:`.gpustep.GpuStep._in_forward`)."""

    buckets: int = 2
    blocks_per_sm: int | None = None
    priority: bool = True
    form: str = "gradient"
    rare_share: float | None = None
    overlapped: bool = True
    lean: bool = False
    spare_sms: int = 0
    comm_first: bool = False
    in_forward: bool = False
    peer: int = 0

    def __post_init__(self):
        if self.in_forward and not (self.lean and self.overlapped and self.form == "gradient" and self.buckets >= 2):
            raise ValueError("the first bucket in the forward kernel needs the lean, overlapped step in the gradient "
                             "form with at least 2 buckets (the parameter form's forward pass reads the W1 it would "
                             f"write), got {self}")
        if self.peer and not (self.in_forward and 2 <= self.buckets < PEER_SLOTS):
            raise ValueError(f"the peer update (all-reduce fused with the update over NVLink) is swept in the step with "
                             f"the first bucket in the forward kernel, 2 to {PEER_SLOTS - 1} buckets, got {self}")
        if self.peer < 0:
            raise ValueError(f"peer is the number of blocks of the earlier buckets' peer updates (0: NCCL), got {self.peer}")

    @property
    def share(self) -> float:
        """The rare-word bucket's share of the work."""
        return 1.0 / self.buckets if self.rare_share is None else self.rare_share

    def blocks(self, sms: int) -> int | None:
        if self.blocks_per_sm is None:
            return None
        if self.spare_sms == 0:
            return self.blocks_per_sm * sms
        if not 0 < self.spare_sms < sms:
            raise ValueError(f"spare_sms must leave the scatter at least one of the {sms} SMs, got {self.spare_sms}")
        # The first bucket is scattered before any all-reduce has started: one block per document.
        return [None] + [self.blocks_per_sm * (sms - self.spare_sms)] * (self.buckets - 1)

    @property
    def label(self) -> str:
        k = self.blocks_per_sm
        grid = "one block per document" if k is None else f"{k} block{'s' if k != 1 else ''} per SM"
        if self.spare_sms:
            grid = f"one block per document, then {grid} on all but {self.spare_sms} SMs"
        what = "" if self.form == "gradient" else "parameter average, "
        share = "" if self.rare_share is None else f" (the rarest words' {self.rare_share:.0%} of the work first)"
        what = what if self.overlapped else "not overlapped, " + what
        streams = "" if not self.lean else ", one stream" if not self.overlapped else \
            ", two streams, all-reduce first" if self.comm_first else \
            ", two streams, first bucket in the forward kernel" if self.in_forward else ", two streams"
        if self.peer:
            streams += f", all-reduce fused with the update over NVLink ({self.peer} blocks beside the scatter)"
        return (f"{what}{self.buckets} buckets{share}, scatter on {grid}, "
                f"{'high' if self.priority else 'equal'} priority{streams}")


#: The rare-word bucket's share of the work in the sweep's unequal cuts: its all-reduce (89% of W1's
#: bytes) starts after a quarter of the scatter instead of half, and the frequent words' bucket
#: left for the last all-reduce grows from ~0.26 to ~1.9 MB (counted on the CPU for this corpus).
RARE_SHARE = 0.25
#: SMs the narrow scatter leaves empty for NCCL's blocks: as many as NCCL's channels at most (32 with
#: NCCL_MIN_NCHANNELS=32, the setting the H200 run kept), each channel one block.
SPARE_SMS = 32
#: The lean steps (:meth:`.gpustep.GpuStep.lean_step`): at B = 1,024 the split step not overlapped cost 28 µs
#: more than the plain one on the H200s where its kernels and its second all-reduce add up to 9 µs,
#: all of it in the step's streams and events. Both forms and both grids, overlapped (two streams),
#: the rare-word bucket's quarter cut, and not overlapped (one stream: what splitting costs with no
#: cross-stream dependency at all); and with the all-reduce launched first (comm_first: its kernel,
#: not the next scatter, is what follows the first bucket's scatter on the caller's stream; in a graph
#: the scatter on the other stream starts a cross-stream dependency later, and NCCL's blocks are placed
#: before the scatter's fill the SMs), which was the fastest overlapped step at four of the seven
#: batches of the H100 run: there also on 4 blocks per SM (more room for NCCL's blocks), with the
#: quarter cut on 8, and in three buckets. (The scatter on one block per SM of all but SPARE_SMS,
#: which leaves whole SMs to NCCL, was behind the fastest overlapped step at every batch of the H100
#: run, by 5 µs at B = 1,024 to 126 µs at 65,536: a grid that small cannot keep the scatter's
#: atomics in flight. It is no longer swept.)
LEAN = tuple(Overlap(2, k, True, form, lean=True) for form in ("parameters", "gradient") for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE, lean=True) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", overlapped=False, lean=True) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", lean=True, comm_first=True) for k in (None, 8, 4)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE, lean=True, comm_first=True) for k in (None, 8)) + \
    (Overlap(2, None, True, "gradient", lean=True, comm_first=True),
     Overlap(3, 8, True, "parameters", lean=True, comm_first=True)) + \
    tuple(Overlap(2, k, True, "gradient", share, lean=True, in_forward=True) for k in (None, 8)
          for share in (None, RARE_SHARE))
#: Blocks of the earlier buckets' peer updates (06_peer_update.cu, 512 threads each, one per SM) beside
#: the later buckets' scatter: the SMs the peer update takes, the scatter keeps the rest (a development
#: sweep on the H100s also tried 16 and 132, every SM: both slower than 32 or 66 at every batch it
#: timed, B = 1,024 to 8,192 and 65,536).
PEER_BLOCKS = (32, 48, 66, 96)
#: The overlapped step with the all-reduce fused with the update over NVLink (two GPUs only): the first
#: bucket's gradient in the forward kernel, its peer update beside the frequent words' scatter.
PEER_OVERLAPS = tuple(Overlap(2, k, True, "gradient", share, lean=True, in_forward=True, peer=n)
                      for n in PEER_BLOCKS for k in (None, 8) for share in (None, RARE_SHARE))
#: The bucketed step's launch configurations the run tries at every batch (the fastest is kept).
#: 128-thread blocks: an H100 SM holds 16 of them, so 12, 8 and 4 per SM leave it 512 to 1,536
#: threads for NCCL's blocks (512 or 640 threads each).
OVERLAPS = tuple(Overlap(n, k, p) for n in (2, 4) for k in (None, 12, 8, 4) for p in (True, False)) + \
    tuple(Overlap(n, k, True, "parameters") for n in (2, 4) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", overlapped=False) for k in (None, 8)) + \
    LEAN + PEER_OVERLAPS
#: NCCL settings tried at the largest batch, each in a fresh pair of processes (NCCL reads them once):
#: fewer channels or threads (less contention with the scatter beside it), or more channels (a faster
#: all-reduce of the 16.8 MB at the cost of more SMs).
NCCL_SETTINGS = ({}, {"NCCL_MAX_NCHANNELS": "8"}, {"NCCL_NTHREADS": "256"}, {"NCCL_MIN_NCHANNELS": "32"})
#: The bucketed configurations timed under each NCCL setting (with the plain step's forms): the
#: fastest of each kind at the largest batch in the recorded runs (four streams in both forms, the
#: lean step, all-reduce first), not the whole sweep: each setting needs its own processes, and the
#: whole sweep under four settings took half of the H100 run's time.
NCCL_SWEEP = (Overlap(2, 8, False), Overlap(2, 8, True, "parameters", RARE_SHARE), Overlap(4, None, True, "parameters"),
              Overlap(2, 8, True, "parameters", lean=True), Overlap(2, 8, True, "parameters", lean=True, comm_first=True),
              Overlap(2, None, True, "parameters", RARE_SHARE, lean=True, comm_first=True),
              Overlap(2, 8, True, "gradient", lean=True, in_forward=True))


def nccl_label(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "NCCL defaults"


#: The peer update's operation in the timeline.
PEER_OP = "all-reduce and update over NVLink"
#: The plain step's forms with the peer update: after step 9's gradient kernel, or after the forward
#: kernel that forms W1's whole gradient.
PEER_SPLITS = ("peer", "forward peer")


#: The plain step's forms, by (form, split): what the sweep tries and the run records.
PLAIN_FORMS = {("gradient", False): "step 9's gradient kernel", ("gradient", True): "split gradient",
               ("gradient", "forward"): "gradient in the forward kernel",
               ("parameters", False): "parameter average, step 9's kernels",
               ("parameters", True): "parameter average, split",
               ("gradient", "peer"): "step 9's gradient kernel, all-reduce fused with the update over NVLink",
               ("gradient", "forward peer"): "gradient in the forward kernel, all-reduce fused with the update over NVLink"}


def plain_forms(world: int) -> list:
    """The plain step's forms on ``world`` GPUs: the peer update's only on two."""
    return [key for key in PLAIN_FORMS if world == 2 or key[1] not in PEER_SPLITS]


def overlaps(configs, world: int) -> tuple:
    """``configs`` that run on ``world`` GPUs: the peer update's only on two."""
    return tuple(c for c in configs if world == 2 or not c.peer)
