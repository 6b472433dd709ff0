"""The AlexNet chapter's Winograd steps (23: F(2x2,3x3), 24: F(4x4,3x3)): the transforms'
matrices, their geometry and the scratch they need (:class:`.launchers.Winograd` binds them);
this module reads only the layers' shapes (:mod:`.problem`), so it does not import the ladder.
Winograd's minimal filtering applies to the 3 x 3, stride-1 layers (3, 4 and 5); on the
others a Winograd step runs the chapter's fastest fp32 kernel for that layer
(:data:`FALLBACK`): the ladder hands those layers to that step (:class:`.launchers.Where`),
and :func:`gpulab.workloads.alexnet.views.kernels_per_layer` says which ran where.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .problem import LAYERS

#: Output tile side m of F(m x m, 3 x 3) for each Winograd step.
TILE = {"23": 2, "24": 4}
#: The step each layer runs where Winograd does not apply (not 3 x 3 with stride 1): the
#: fastest fp32 step on that layer in the recorded H100 run (step 22 on layers 1 and 2;
#: tests/test_alexnet_winograd.py checks the choice against the run).
FALLBACK = {1: "22", 2: "22"}
GEMM_TILE = 128          # WG_BM = WG_BN in winograd_gemm.h: Mp and Pp are multiples of it
GEMM_BK = 8              # WG_BK: Kp is a multiple of it
GEMM_THREADS = 256
TRANSFORM_BLOCK = 128    # TRANSFORM_BLOCK in the step files

# Lavin and Gray (2016): Y = A^T [(G g G^T) * (B^T d B)] A is the correlation of the
# (m + 2) x (m + 2) tile d with the 3 x 3 filter g, an m x m block of outputs.
_F2 = (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
       np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
       np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64))
_F4 = (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64),
       np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
       np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                dtype=np.float64))
#: {m: (B^T, G, A^T)} for F(m x m, 3 x 3), as the kernel files spell them out.
MATRICES = {2: _F2, 4: _F4}


def winograd_tile(d: np.ndarray, g: np.ndarray, m: int) -> np.ndarray:
    """F(m x m, 3 x 3) on one (m + 2) x (m + 2) tile ``d`` and one 3 x 3 filter ``g``,
    in the precision of the arrays given (the transforms' matrices cast to it)."""
    BT, G, AT = (a.astype(np.result_type(d, g)) for a in MATRICES[m])
    return AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T


def applies(layer) -> bool:
    """Whether F(m x m, 3 x 3) computes ``layer``: a 3 x 3 filter with stride 1."""
    return layer.R == 3 and layer.S == 3 and layer.U == 1


def _require(layer) -> None:
    if not applies(layer):
        raise ValueError(f"Winograd F(m x m, 3 x 3) needs a 3 x 3 filter with stride 1; {layer.name} has "
                         f"{layer.R} x {layer.S}, stride {layer.U} (the ladder runs step "
                         f"{FALLBACK.get(layer.index, '?')} there: gpulab.workloads.alexnet.launchers.Where)")


@dataclass(frozen=True)
class Geometry:
    """The transform domain of one layer at batch size N for tiles of m x m outputs."""

    m: int
    TH: int      # tiles down a plane: ceil(E / m)
    TW: int      # tiles across: ceil(F / m)
    P: int       # tiles in all: N * TH * TW (the GEMMs' columns)
    Pp: int      # P rounded up to the GEMM tile
    Mp: int      # filters rounded up to the GEMM tile
    Kp: int      # channels rounded up to the GEMM slice

    @property
    def points(self) -> int:
        """Transform points: (m + 2)^2, the number of matrix products."""
        return (self.m + 2) ** 2


def geometry(step_number: str, layer, N: int) -> Geometry:
    m = TILE[step_number]
    TH, TW = -(-layer.E // m), -(-layer.F // m)
    P = N * TH * TW
    up = lambda v, q: -(-v // q) * q          # noqa: E731
    return Geometry(m=m, TH=TH, TW=TW, P=P, Pp=up(P, GEMM_TILE), Mp=up(layer.M, GEMM_TILE),
                    Kp=up(layer.C, GEMM_BK))


def scratch_bytes(step, layer, N: int) -> int:
    """U, V and Mt in the transform domain."""
    _require(layer)
    g = geometry(step.number, layer, N)
    return 4 * g.points * (g.Kp * g.Mp + g.Kp * g.Pp + g.Mp * g.Pp)


def launch_config(step, layer, N: int) -> dict:
    """The batched GEMM's grid, block and dynamic shared memory (none: its 16 KB of tiles
    are static)."""
    _require(layer)
    g = geometry(step.number, layer, N)
    return {"grid": (g.Pp // GEMM_TILE, g.Mp // GEMM_TILE, g.points), "block": (GEMM_THREADS,), "shared_bytes": 0}


def multiplies(step_number: str, layer, N: int) -> int:
    """Multiplies the step's GEMMs do on ``layer`` (tiles past the edge included), against
    direct convolution's N*M*E*F*C*R*S."""
    g = geometry(step_number, layer, N)
    return g.points * g.P * layer.M * layer.C


def multiply_table(N: int, layers=None) -> pd.DataFrame:
    """Per 3 x 3 layer: direct convolution's multiplies against F(2x2,3x3)'s and
    F(4x4,3x3)'s at batch size N, the tiles past the output's edge included."""
    rows = []
    for layer in layers or LAYERS:
        if not applies(layer):
            continue
        direct = N * layer.M * layer.E * layer.F * layer.K
        row = {"layer": layer.name, "output E x F": f"{layer.E} x {layer.F}", "direct (G mul)": direct / 1e9}
        for number, m in TILE.items():
            g = geometry(number, layer, N)
            row[f"F({m}x{m},3x3) tiles"] = f"{g.TH} x {g.TW}"
            row[f"F({m}x{m},3x3) (G mul)"] = multiplies(number, layer, N) / 1e9
            row[f"F({m}x{m},3x3) fewer"] = direct / multiplies(number, layer, N)
        rows.append(row)
    return pd.DataFrame(rows).set_index("layer")


def suffix(step) -> str:
    """The kernels' suffix of a Winograd step: "2x2" or "4x4"."""
    m = TILE[step.number]
    return f"{m}x{m}"
