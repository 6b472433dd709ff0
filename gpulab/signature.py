"""Read the signatures of the ``__global__`` kernels in a CUDA C source.

Both backends use this: the GPU path to check a launch's arguments before CuPy
sees them (CuPy would pass a Python float to a ``float`` parameter as a double
and the kernel would read garbage), the CPU backend to generate the code that
unpacks arguments for each kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import KernelArgumentError

# C type spelled in a kernel parameter -> NumPy dtype of the array (for
# pointers) or of the scalar (for values).  Vector types map to their element
# type: a ``float4*`` parameter takes a float32 array whose length is a
# multiple of 4.
_C_TO_NUMPY = {
    "float": (np.float32, 1),
    "double": (np.float64, 1),
    "__half": (np.float16, 1),
    "half": (np.float16, 1),
    "__half2": (np.float16, 2),
    "half2": (np.float16, 2),
    # bfloat16 (cuda_bf16.h): NumPy and CuPy have no such type; arrays hold its bit patterns.
    "__nv_bfloat16": (np.uint16, 1),
    "nv_bfloat16": (np.uint16, 1),
    "int": (np.int32, 1),
    "signed int": (np.int32, 1),
    "unsigned": (np.uint32, 1),
    "unsigned int": (np.uint32, 1),
    "int32_t": (np.int32, 1),
    "uint32_t": (np.uint32, 1),
    "long long": (np.int64, 1),
    "long long int": (np.int64, 1),
    "int64_t": (np.int64, 1),
    "unsigned long long": (np.uint64, 1),
    "unsigned long long int": (np.uint64, 1),
    "uint64_t": (np.uint64, 1),
    "size_t": (np.uint64, 1),
    "short": (np.int16, 1),
    "unsigned short": (np.uint16, 1),
    "char": (np.int8, 1),
    "signed char": (np.int8, 1),
    "int8_t": (np.int8, 1),
    "unsigned char": (np.uint8, 1),
    "uint8_t": (np.uint8, 1),
    "bool": (np.bool_, 1),
    "float2": (np.float32, 2),
    "float3": (np.float32, 3),
    "float4": (np.float32, 4),
    "double2": (np.float64, 2),
    "int2": (np.int32, 2),
    "int4": (np.int32, 4),
    "uint2": (np.uint32, 2),
    "uint4": (np.uint32, 4),
    # Hopper's tensor-map descriptor (kernels/common/hopper.h), passed by value:
    # a gpulab.tensormap.TensorMap from Python.
    "CUtensorMap": (None, 1),
}
#: A CUtensorMap parameter's value: 128 opaque bytes, as a NumPy structured scalar (what CuPy
#: passes by value to a struct parameter).
TENSOR_MAP_DTYPE = np.dtype([("opaque", "<u8", (16,))])
_C_TO_NUMPY["CUtensorMap"] = (TENSOR_MAP_DTYPE, 1)

_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|__grid_constant__)\b")


@dataclass(frozen=True)
class Param:
    """One kernel parameter as written in the source."""

    name: str
    ctype: str          # base type without qualifiers or '*', e.g. "float", "float4"
    is_pointer: bool
    is_const: bool      # const-qualified pointee (a read-only input)
    dtype: np.dtype     # element dtype of the array, or the scalar's dtype
    lanes: int          # elements per C value (4 for float4, 1 for float)
    declaration: str    # the text as written, for error messages

    def describe(self) -> str:
        kind = f"{self.dtype.name} array" if self.is_pointer else f"{self.dtype.name} scalar"
        if self.dtype.kind == "V":
            kind = "tensor map from gpulab.tensormap.encode_2d"
        return f"'{self.name}' ({self.declaration.strip()}: expects a {kind})"


#: The most blocks a cluster may have (the portable limit; sm_90 allows 16 only by opting in).
MAX_CLUSTER_BLOCKS = 8


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    line: int           # 1-based line of the kernel's name in the source
    #: Blocks per thread-block cluster along x, y, z, from the kernel's ``__cluster_dims__``
    #: (compile-time cluster dimensions: a plain launch then runs the grid in clusters of this
    #: shape); (1, 1, 1) without one.
    cluster: tuple[int, int, int] = (1, 1, 1)

    def check_clusters(self, grid) -> None:
        """A kernel with ``__cluster_dims__``: the grid (x, y, z) must be whole clusters of at most
        :data:`MAX_CLUSTER_BLOCKS` blocks, as CUDA requires; raises KernelArgumentError."""
        if self.cluster == (1, 1, 1):
            return
        blocks = self.cluster[0] * self.cluster[1] * self.cluster[2]
        if blocks > MAX_CLUSTER_BLOCKS:
            raise KernelArgumentError(f"kernel '{self.name}': __cluster_dims__{self.cluster} has {blocks} blocks; a "
                                      f"cluster has at most {MAX_CLUSTER_BLOCKS} (the portable limit)")
        if any(g % c for g, c in zip(grid, self.cluster)):
            raise KernelArgumentError(f"kernel '{self.name}' runs in clusters of {self.cluster} blocks "
                                      f"(__cluster_dims__): grid {tuple(grid)} must be a multiple of that in every "
                                      "dimension")


def strip_comments(source: str) -> str:
    """Blank out comments and the contents of string and character literals,
    keeping every newline so line numbers still match the original source."""

    def blank(match: re.Match) -> str:
        text = match.group(0)
        if text.startswith(("//", "/*")):
            return re.sub(r"[^\n]", " ", text)
        return text[0] + re.sub(r"[^\n]", " ", text[1:-1]) + text[-1]

    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\''
    return re.sub(pattern, blank, source, flags=re.S)


_ATTRIBUTES = r"(?:(?:__launch_bounds__|__cluster_dims__)\s*\([^)]*\)\s*)*"
_KERNEL_HEAD = re.compile(
    r"__global__\s+(" + _ATTRIBUTES + r")void\s+(" + _ATTRIBUTES + r")([A-Za-z_]\w*)\s*\("
)
_CLUSTER_DIMS = re.compile(r"__cluster_dims__\s*\(([^)]*)\)")


def _cluster_dims(attributes: str, kernel: str) -> tuple[int, int, int]:
    """The x, y, z of a ``__cluster_dims__(x[, y[, z]])`` among ``attributes``, or (1, 1, 1)."""
    found = _CLUSTER_DIMS.search(attributes)
    if not found:
        return (1, 1, 1)
    try:
        dims = tuple(int(v, 0) for v in found.group(1).split(","))
    except ValueError:
        raise ValueError(f"kernel '{kernel}': __cluster_dims__({found.group(1)}) must name its sizes as integer "
                         "literals (gpulab reads them to launch the kernel's clusters)") from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ValueError(f"kernel '{kernel}': __cluster_dims__({found.group(1)}) takes 1 to 3 positive sizes")
    return dims + (1,) * (3 - len(dims))


def _split_params(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    tail = "".join(current)
    if tail.strip() and tail.strip() != "void":
        parts.append(tail)
    return parts


def _parse_param(decl: str, kernel: str) -> Param:
    text = " ".join(decl.split())
    match = re.match(r"^(.*?)([A-Za-z_]\w*)\s*(\[\s*\])?$", text)
    if not match or not match.group(1).strip():
        raise ValueError(f"kernel '{kernel}': cannot read parameter '{text}'")
    type_text, name, brackets = match.group(1), match.group(2), match.group(3)
    is_pointer = "*" in type_text or bool(brackets)
    if type_text.count("*") > 1:
        raise ValueError(f"kernel '{kernel}': parameter '{text}' is a pointer to a pointer, "
                         "which gpulab cannot pass; use one flat array")
    is_const = bool(re.search(r"\bconst\b", type_text.split("*")[0]))
    base = _QUALIFIERS.sub(" ", type_text).replace("*", " ").replace("&", " ")
    base = " ".join(base.split())
    if base not in _C_TO_NUMPY:
        raise ValueError(
            f"kernel '{kernel}': parameter '{name}' has type '{base}', which gpulab does not "
            f"know how to pass (known: {', '.join(sorted(_C_TO_NUMPY))})")
    dtype, lanes = _C_TO_NUMPY[base]
    return Param(name=name, ctype=base, is_pointer=is_pointer, is_const=is_const,
                 dtype=np.dtype(dtype), lanes=lanes, declaration=text)


def parse_kernels(source: str) -> dict[str, KernelSignature]:
    """Return every ``__global__`` kernel of ``source`` by name, in source order.

    Templates are not supported: the lab's kernels are ``extern "C"`` functions
    with fixed types, so that CuPy and the CPU backend find them by name.
    """
    clean = strip_comments(source)
    kernels: dict[str, KernelSignature] = {}
    for match in _KERNEL_HEAD.finditer(clean):
        name = match.group(3)
        cluster = _cluster_dims(match.group(1) + match.group(2), name)
        start = match.end()
        depth, end = 1, start
        while depth and end < len(clean):
            depth += {"(": 1, ")": -1}.get(clean[end], 0)
            end += 1
        params = tuple(_parse_param(p, name) for p in _split_params(clean[start:end - 1]))
        line = clean.count("\n", 0, match.start(3)) + 1
        kernels[name] = KernelSignature(name=name, params=params, line=line, cluster=cluster)
    return kernels
