"""Step 10's thread-to-data map and its load count, from the constants its kernel is compiled with.

``kernels/lenet/10_fused_relu_pool.cu`` is compiled per layer with CH, MF, IH and the block
shape :data:`~.launchers.FUSED_SHAPE` (BY pooled rows per block, PX pooled columns per thread);
the launch is grid (ceil(P / BY), N), block (P / PX, BY). Thread (tx, ty) of block bx owns
pooled row bx * BY + ty, pooled columns tx * PX ... tx * PX + PX - 1, so the 2 x 2PX
convolution outputs under them, for every filter; it reads input rows 2 * (bx * BY + ty) + 0 ...
+ 7 and columns 2 * PX * tx + 0 ... + 2 * PX + 5 of the block's rows in shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .network import CONV1, CONV2, Conv
from .launchers import FUSED_SHAPE

#: Step 7's load instructions per FFMA (its kernel file, read off its sm_90 SASS): one global
#: load of x per multiply-add, plus one uniform constant load per weight (conv1, ULDC) or per
#: pair of weights (conv2, ULDC.64).
STEP7_LOADS_PER_FMA = {"conv1": 2.0, "conv2": 1.5}


@dataclass(frozen=True)
class Step10Shape:
    """One layer's step-10 launch, in the kernel's names."""

    layer: Conv
    BY: int          # pooled rows per block
    PX: int          # pooled columns per thread

    @property
    def TX(self) -> int:                      # threads across a block
        return self.layer.P // self.PX

    @property
    def threads(self) -> int:
        return self.TX * self.BY

    @property
    def blocks_per_image(self) -> int:
        return -(-self.layer.P // self.BY)

    @property
    def COLS(self) -> int:                    # input columns a thread reads per row
        return 2 * self.PX + self.layer.K - 1

    @property
    def ROWS(self) -> int:                    # input rows a block stages
        return 2 * self.BY + self.layer.K - 1


def shape(layer: Conv) -> Step10Shape:
    return Step10Shape(layer, **FUSED_SHAPE[layer.name])


def loads_per_fma(layer: Conv) -> dict:
    """Step 10's shared-memory load instructions and FFMAs per thread, per input channel and
    filter row (the kernel's inner loop body): two input rows of COLS floats as float2 loads,
    K x M/4 float4 loads of weights, and K x M x (2 x 2PX) multiply-adds."""
    s = shape(layer)
    K, M = layer.K, layer.M
    input_loads = 2 * (s.COLS // 2)          # float2 loads: COLS / 2 per row, two rows
    weight_loads = K * (M // 4)              # one 16-byte broadcast load per 4 filters per tap
    fmas = K * M * 2 * (2 * s.PX)
    return {"layer": layer.name, "input loads": input_loads, "weight loads": weight_loads,
            "FMAs": fmas, "loads per FMA": (input_loads + weight_loads) / fmas,
            "step 7 loads per FMA": STEP7_LOADS_PER_FMA[layer.name]}


def maps(layer: Conv, block: int = 0, thread: tuple[int, int] = (1, 1)) -> dict:
    """Integer maps of one image for :mod:`gpulab.diagrams`: ``conv`` and ``pooled`` hold the
    in-block thread id (ty * TX + tx) owning each output, ``conv_block`` and ``pooled_block``
    the block; ``staged`` marks the input rows ``block`` copies into shared memory, ``reads``
    the input cells thread ``thread`` = (tx, ty) of that block reads, ``owner`` its id."""
    s = shape(layer)
    P, E, H = layer.P, layer.E, layer.H
    py, px = np.mgrid[0:P, 0:P]
    pooled_block = py // s.BY
    pooled = (py % s.BY) * s.TX + px // s.PX
    conv = np.repeat(np.repeat(pooled, 2, axis=0), 2, axis=1)[:E, :E]
    conv_block = np.repeat(np.repeat(pooled_block, 2, axis=0), 2, axis=1)[:E, :E]
    row_band = np.minimum(np.arange(H) // (2 * s.BY), s.blocks_per_image - 1)
    bands = np.repeat(row_band[:, None], H, axis=1)
    staged = np.zeros((H, H), dtype=bool)
    first = 2 * block * s.BY
    staged[first:first + s.ROWS, :] = True
    tx, ty = thread
    reads = np.zeros((H, H), dtype=bool)
    row0, col0 = 2 * (block * s.BY + ty), 2 * s.PX * tx
    reads[row0:row0 + 2 + layer.K - 1, col0:col0 + s.COLS] = True
    return {"conv": conv, "conv_block": conv_block, "pooled": pooled, "pooled_block": pooled_block,
            "bands": bands, "staged": staged, "reads": reads, "owner": ty * s.TX + tx, "shape": s}


def figure(caption: str | None = None, layers=(CONV1, CONV2)):
    """Step 10's thread-to-data map, one row per layer: the input in shared memory (one
    channel), the convolution outputs in registers, the pooled outputs written."""
    from ... import diagrams
    counts = {layer.name: loads_per_fma(layer) for layer in layers}
    text = "; ".join(
        f"{name}: per channel and filter row a thread issues {c['input loads']} input + {c['weight loads']} weight "
        f"loads for {c['FMAs']} FMAs = 1/{1 / c['loads per FMA']:.1f} load per FMA (step 7: "
        f"{c['step 7 loads per FMA']:g})" for name, c in counts.items())
    fig, axes = diagrams.panels(3, rows=len(layers), size=(10.5, 4.6 * len(layers)),
                                title="Step 10: which thread computes which outputs, and which inputs does it read?",
                                caption=text + (f". {caption}" if caption else ""))
    for row, layer in zip(np.atleast_2d(axes), layers):
        m = maps(layer)
        s, who = m["shape"], m["owner"]
        diagrams.ownership(row[0], m["bands"], title=f"{layer.name} input ({layer.H} x {layer.H}, one of {layer.C} "
                           f"channel{'s' if layer.C > 1 else ''}), coloured by block")
        diagrams.outline(row[0], m["staged"], color="#333333", lw=2, linestyle="--")
        diagrams.outline(row[0], m["reads"], color=diagrams.HIGHLIGHT, lw=2)
        mark_conv = ((m["conv"] == who) & (m["conv_block"] == 0), diagrams.HIGHLIGHT)
        mark_pooled = ((m["pooled"] == who) & (m["pooled_block"] == 0), diagrams.HIGHLIGHT)
        diagrams.ownership(row[1], m["conv"], group=m["conv_block"], marks=[mark_conv],
                           title=f"conv outputs ({layer.E} x {layer.E}, x {layer.M} filters): "
                                 f"2 x {2 * s.PX} per thread, in registers, never written")
        diagrams.ownership(row[2], m["pooled"], group=m["pooled_block"], marks=[mark_pooled],
                           title=f"pooled output ({layer.P} x {layer.P}): {s.PX} per thread; block "
                                 f"{s.TX} x {s.BY} threads, {s.blocks_per_image} per image")
    diagrams.legend(fig, {"one thread (tx = 1, ty = 1 of block 0) and what it reads":
                                                 diagrams.HIGHLIGHT, "dashed: the rows block 0 stages": "white"})
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    return fig


def compiled_resources(layer: Conv, min_blocks: int = 1, arch: str = "sm_90") -> dict:
    """Registers, spilled bytes and the resulting occupancy of step 10's kernel for ``layer``
    compiled by NVRTC for ``arch`` (no GPU needed) with ``__launch_bounds__(threads,
    min_blocks)``. Raises RuntimeError saying why where NVRTC is not installed."""
    from ... import paths
    from ...cpu import resources
    if min_blocks < 1:
        raise ValueError(f"min_blocks must be at least 1, got {min_blocks}")
    why = resources.unavailable()
    if why:
        raise RuntimeError(why)
    s = shape(layer)
    defines = {"CH": layer.C, "MF": layer.M, "IH": layer.H, "BY": s.BY, "PX": s.PX, "MIN_BLOCKS": min_blocks}
    source = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + \
        (paths.KERNELS / "lenet" / "10_fused_relu_pool.cu").read_text()
    table = resources._resources(source, "lenet/10_fused_relu_pool.cu", arch,
                                 (str(paths.KERNELS), str(paths.KERNELS / "lenet")))
    row = table.loc["conv_relu_pool"]
    shared = int(row["static_shared_bytes"])
    held = resources.occupancy(int(row["registers"]), s.threads, shared)
    return {"layer": layer.name, "__launch_bounds__": f"({s.threads}, {min_blocks})",
            "registers": int(row["registers"]), "spilled bytes": int(row["local_bytes"]),
            "blocks per SM": held["blocks"], "occupancy": held["occupancy"]}
