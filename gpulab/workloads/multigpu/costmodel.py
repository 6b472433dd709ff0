"""The ring all-reduce cost model: a model, not a measurement.

An all-reduce of ``S`` bytes over ``p`` GPUs in a ring is a reduce-scatter
followed by an all-gather, each ``p - 1`` steps; in every step each GPU sends
and receives one chunk of ``S / p`` bytes. So each GPU moves
``2 (p - 1) / p x S`` bytes in each direction, in ``2 (p - 1)`` steps:

    T(S, p) = 2 (p - 1) / p x S / bw  +  2 (p - 1) x alpha

with ``bw`` the bandwidth each GPU's link sustains in one direction and
``alpha`` the fixed cost of one step (launch, synchronisation, link latency).
NCCL's tests report the *bus bandwidth* ``busbw = 2 (p - 1) / p x S / T``:
for large messages it approaches ``bw`` whatever ``p`` is, which is why it is
the number to compare across GPU counts.

Assumptions (each one can fail, and the chapter says so):

* one ring, every link equally fast (true inside an NVSwitch board, where
  each GPU reaches every other one at its full NVLink bandwidth). Across
  nodes NCCL does not send the whole ring through one network port: it builds
  one ring (channel) per NIC, each carrying 1/8 of the data, which moves the
  same bytes per NIC as the hierarchical form :func:`hierarchical_time_ms`
  (reduce-scatter in the node, all-reduce across, all-gather in the node);
* ``bw`` and ``alpha`` do not depend on ``p`` (NCCL switches to trees and
  other algorithms at scale; the ring is an upper bound on the time of large
  messages);
* no contention with computation running at the same time.

:func:`fit` estimates ``bw`` and ``alpha`` from measured (size, time) points of
one GPU count; :func:`predict` extrapolates to other ``p`` and links.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import datasheet

#: An assumed fixed cost per ring step across nodes (µs), for the 2-node
#: prediction: network latency plus NCCL's proxy, an assumption, not a datasheet
#: figure or a measurement.
NETWORK_STEP_US = 5.0


@dataclass(frozen=True)
class RingModel:
    """``bw_gbs``: GB/s per GPU per direction; ``alpha_us``: µs per ring step;
    ``source``: where the two numbers came from (fitted, datasheet, assumed)."""

    bw_gbs: float
    alpha_us: float
    source: str = ""
    #: One standard error of each (from the fit; 0 for datasheet or assumed numbers).
    bw_err: float = 0.0
    alpha_err: float = 0.0

    def __post_init__(self):
        if not self.bw_gbs > 0:
            raise ValueError(f"bw_gbs must be a positive bandwidth in GB/s, got {self.bw_gbs}")
        if self.alpha_us < 0:
            raise ValueError(f"alpha_us must be a non-negative time in µs, got {self.alpha_us}")

    def time_ms(self, nbytes, p: int):
        """Predicted all-reduce time (ms) of ``nbytes`` bytes over ``p`` GPUs."""
        return allreduce_time_ms(nbytes, p, self.bw_gbs, self.alpha_us)


def _check_p(p: int) -> int:
    if int(p) != p or p < 1:
        raise ValueError(f"p must be a whole number of GPUs >= 1, got {p}")
    return int(p)


def allreduce_time_ms(nbytes, p: int, bw_gbs: float, alpha_us: float):
    """``2 (p-1)/p x nbytes / bw + 2 (p-1) x alpha``, in ms (0 for one GPU).
    ``nbytes`` may be an array."""
    p = _check_p(p)
    nbytes = np.asarray(nbytes, np.float64)
    if np.any(nbytes < 0):
        raise ValueError("nbytes must be non-negative")
    if bw_gbs <= 0:
        raise ValueError(f"bw_gbs must be positive, got {bw_gbs}")
    t = 2 * (p - 1) / p * nbytes / (bw_gbs * 1e9) * 1e3 + 2 * (p - 1) * alpha_us * 1e-3
    return float(t) if t.ndim == 0 else t


def bus_bandwidth_gbs(nbytes, time_ms, p: int):
    """NCCL's bus bandwidth (GB/s) of an all-reduce of ``nbytes`` that took ``time_ms``."""
    p = _check_p(p)
    if p < 2:
        raise ValueError("bus bandwidth needs at least 2 GPUs")
    t = np.asarray(time_ms, np.float64)
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    out = 2 * (p - 1) / p * np.asarray(nbytes, np.float64) / (t * 1e-3) / 1e9
    return float(out) if out.ndim == 0 else out


def fit(nbytes, time_ms, p: int) -> RingModel:
    """``bw`` and ``alpha`` fitted to measured all-reduce times of one GPU count
    by least squares on the *relative* error (so the small, latency-bound sizes
    count as much as the large ones)."""
    p = _check_p(p)
    if p < 2:
        raise ValueError("fitting an all-reduce model needs measurements on at least 2 GPUs")
    s, t = np.asarray(nbytes, np.float64), np.asarray(time_ms, np.float64)
    if s.shape != t.shape or s.ndim != 1 or len(s) < 2:
        raise ValueError(f"need two 1-D arrays of the same length >= 2, got shapes {s.shape} and {t.shape}")
    if len(np.unique(s)) < 2:
        raise ValueError("need at least two different sizes to separate bandwidth from latency")
    # t = a s + b with a = 2(p-1)/p / bw, b = 2(p-1) alpha; weight 1/t: relative residuals.
    design = np.stack([s, np.ones_like(s)], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if a <= 0:
        raise ValueError("the fitted time does not grow with the size: these points are not an all-reduce curve")
    # Standard errors from the residuals (n - 2 degrees of freedom; none with two points).
    resid = design @ np.array([a, b]) - 1.0
    dof = len(s) - 2
    cov = (resid @ resid / dof) * np.linalg.inv(design.T @ design) if dof > 0 else np.zeros((2, 2))
    bw_gbs = 2 * (p - 1) / p / (a * 1e-3) / 1e9
    alpha_us = max(0.0, b / (2 * (p - 1)) * 1e3)
    return RingModel(bw_gbs, alpha_us, f"fitted to {len(s)} measured sizes on {p} GPUs",
                     bw_err=float(bw_gbs * np.sqrt(cov[0, 0]) / a), alpha_err=float(np.sqrt(cov[1, 1]) / (2 * (p - 1)) * 1e3))


def datasheet_model(link: str = "nvlink4", alpha_us: float = 0.0) -> RingModel:
    """A model with the datasheet's one-way bandwidth of ``link`` (see
    :data:`gpulab.datasheet.LINKS`) and an assumed ``alpha_us``."""
    if link not in datasheet.LINKS:
        raise KeyError(f"unknown link {link!r}; the datasheet has {sorted(datasheet.LINKS)}")
    info = datasheet.LINKS[link]
    return RingModel(info.gbs_per_direction, alpha_us,
                     f"datasheet bandwidth of {info.name} ({info.source}); alpha {alpha_us:g} µs assumed")


#: GPUs per node in the predictions (an HGX/DGX H100 or H200 board), and NICs per node (one per GPU).
GPUS_PER_NODE = 8


def hierarchical_time_ms(nbytes, nodes: int, inside: RingModel, network: RingModel, per_node: int = GPUS_PER_NODE):
    """An all-reduce over ``nodes`` x ``per_node`` GPUs as NCCL runs it across
    nodes with one NIC per GPU: a reduce-scatter inside each node (each GPU
    ends with the node's sum of 1/per_node of the data), an all-reduce of that
    1/per_node across the nodes -- every GPU through its own NIC, so the
    per_node NICs of a node work in parallel -- then an all-gather inside the
    node. NCCL's rings (one channel per NIC, each carrying 1/per_node of the
    data) move the same bytes per NIC."""
    nbytes = np.asarray(nbytes, np.float64)
    q = _check_p(per_node)
    half = (q - 1) / q * nbytes / (inside.bw_gbs * 1e9) * 1e3 + (q - 1) * inside.alpha_us * 1e-3
    across = allreduce_time_ms(nbytes / q, nodes, network.bw_gbs, network.alpha_us)
    t = 2 * half + across
    return float(t) if np.ndim(t) == 0 else t


def predictions(model: RingModel, nbytes, network_step_us: float = NETWORK_STEP_US) -> dict:
    """What ``model`` (fitted on one node) predicts for an all-reduce of ``nbytes``:

    * ``"8 GPUs, NVLink"``: one 8-GPU board, a ring at the fitted bandwidth and
      step cost (NVSwitch gives each GPU the same bandwidth to all the others);
    * ``"2 nodes x 8 GPUs, one NIC per GPU"``: :func:`hierarchical_time_ms`
      with the fitted model inside each node and, across, one 400 Gb/s port
      per GPU (50 GB/s each way, datasheet) and ``network_step_us`` per step
      (assumed).

    Returns ``{label: (p, RingModel of the slowest link, time_ms)}``."""
    net = datasheet.LINKS["ndr400"]
    across = RingModel(net.gbs_per_direction, network_step_us,
                       f"inside each node the fitted model; across, one 400 Gb/s NIC per GPU, {net.gbs_per_direction:g} "
                       f"GB/s each way ({net.source}), each carrying 1/{GPUS_PER_NODE} of the data; "
                       f"{network_step_us:g} µs per network step assumed")
    return {"2 GPUs (the model itself)": (2, model, model.time_ms(nbytes, 2)),
            "8 GPUs, NVLink": (8, model, model.time_ms(nbytes, 8)),
            "2 nodes x 8 GPUs, one NIC per GPU": (16, across, hierarchical_time_ms(nbytes, 2, model, across))}


def prediction_range(model: RingModel, nbytes, p: int) -> tuple[float, float]:
    """The ring model's time for ``p`` GPUs at the fit's bandwidth and step cost
    +- one standard error each (the slow end: lower bandwidth, higher cost)."""
    lo = RingModel(model.bw_gbs + model.bw_err, max(0.0, model.alpha_us - model.alpha_err))
    hi = RingModel(max(1e-9, model.bw_gbs - model.bw_err), model.alpha_us + model.alpha_err)
    return lo.time_ms(nbytes, p), hi.time_ms(nbytes, p)


def step_time_ms(compute_ms_one_gpu: float, grad_bytes: float, p: int, model: RingModel,
                 overlap: float = 0.0) -> float:
    """A data-parallel step on ``p`` GPUs: the one-GPU compute split ``p`` ways,
    plus the gradient's all-reduce, of which a share ``overlap`` (0 to 1) is
    hidden behind the computation. A model: it ignores the per-launch costs that
    do not shrink with the batch."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be between 0 and 1, got {overlap}")
    compute = compute_ms_one_gpu / _check_p(p)
    comm = model.time_ms(grad_bytes, p)
    return compute + comm - min(overlap * comm, compute)


def scaling_efficiency(t_one_ms, t_p_ms, p: int):
    """Speed-up over one GPU divided by ``p``: 1 is perfect scaling."""
    p = _check_p(p)
    return np.asarray(t_one_ms, np.float64) / (p * np.asarray(t_p_ms, np.float64))
