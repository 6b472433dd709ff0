"""The lab's one table of hardware facts: what the vendor documents, not what we measured.

Two tables, each fact with its source:

- :data:`GPUS`: per product (matched against the device name CUDA reports):
  SM count, clock, memory, bandwidth, L2, and the peak arithmetic rates
  (dense, no sparsity; FP32 on the CUDA cores, TF32 and FP16 on the tensor
  cores).
- :data:`ARCHITECTURES`: per compute capability: the limits of one SM and one
  block (registers, shared memory, warps, blocks), which every GPU of that
  capability shares.

Measured ceilings (a device copy, a cuBLAS SGEMM) live in the recorded runs,
never here: :mod:`gpulab.roofline` prints the two side by side. The book's
prose quotes these values through ``glue`` from :func:`h100`, so a fact is
typed once, here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

#: Where the per-architecture limits come from.
PROGRAMMING_GUIDE = ("CUDA C++ Programming Guide, 'Compute Capabilities', table 'Technical "
                     "Specifications per Compute Capability'")
#: Facts every NVIDIA GPU of this book shares (same source).
WARP_SIZE = 32
SHARED_BANKS = 32          # shared memory: 32 banks ...
BANK_BYTES = 4             # ... of 4 bytes each (successive 4-byte words go to successive banks)
SECTOR_BYTES = 32          # the unit in which L1/L2 move device memory
CACHE_LINE_BYTES = 128     # four sectors
MAX_THREADS_PER_BLOCK = 1024
DEFAULT_SHARED_PER_BLOCK_KIB = 48   # without cudaFuncAttributeMaxDynamicSharedMemorySize
REGISTER_ALLOCATION_UNIT = 256      # registers are given to a warp in units of 256 (8 per thread)
SUB_PARTITIONS = 4                  # an SM's four schedulers each own a quarter of its register file
SHARED_ALLOCATION_UNIT = {7: 256, 8: 128, 9: 128}   # bytes: shared memory is given to a block in these units
SHARED_RESERVED_PER_BLOCK = 1024    # bytes the system keeps per resident block (compute capability >= 8.0)
CONSTANT_MEMORY_KIB = 64            # the __constant__ space of a device ("Constant memory size")
CONSTANT_CACHE_PER_SM_KIB = 8       # "Cache working set per SM for constant memory" (compute capability 9.0)


@dataclass(frozen=True)
class Architecture:
    """Limits of one SM and one block on a compute capability."""

    compute_capability: str
    name: str
    registers_per_sm: int            # 32-bit registers
    max_registers_per_thread: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm_kib: int           # the unified L1/shared array's largest shared carve-out
    shared_per_block_kib: int        # with the opt-in attribute
    fp32_lanes_per_sm: int           # FP32 FMA units: one FMA (2 FLOPs) each per clock
    l1_and_shared_per_sm_kib: int    # the on-chip array split between L1 cache and shared memory
    source: str = PROGRAMMING_GUIDE + "; the architecture's tuning guide for the L1/shared array"

    def blocks_per_sm(self, threads: int, registers_per_thread: int, shared_bytes: int = 0) -> dict:
        """How many blocks of ``threads`` threads fit on one SM at once, and what
        limits it: each of the four limits (warps, registers, shared memory, the
        block count) as a number of blocks, and ``blocks`` = the smallest. The
        arithmetic of CUDA's occupancy calculator (``cuda_occupancy.h``), without
        a GPU, for the largest shared-memory carve-out.

        Registers go to warps in units of 256, and each of the SM's four
        sub-partitions (one per warp scheduler) has its own quarter of the
        register file: a warp's registers all come from one quarter, so
        ``4 * floor(16384 / registers per warp)`` warps fit, not
        ``floor(65536 / registers per warp)``. (CUDA's launch check, a block's
        warps counted in fours against 65,536 registers, follows from the same
        rule: a block that fails it gets 0 here.)"""
        if not 1 <= threads <= MAX_THREADS_PER_BLOCK:
            raise ValueError(f"threads must be 1 to {MAX_THREADS_PER_BLOCK}, got {threads}")
        if not 0 < registers_per_thread <= self.max_registers_per_thread:
            raise ValueError(f"registers_per_thread must be 1 to {self.max_registers_per_thread}, "
                             f"got {registers_per_thread}")
        if shared_bytes < 0:
            raise ValueError(f"shared_bytes must be 0 or more, got {shared_bytes}")
        warps = -(-threads // WARP_SIZE)
        per_warp = -(-registers_per_thread * WARP_SIZE // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        warps_by_registers = SUB_PARTITIONS * (self.registers_per_sm // SUB_PARTITIONS // per_warp)
        reserved = SHARED_RESERVED_PER_BLOCK if float(self.compute_capability) >= 8.0 else 0
        unit = SHARED_ALLOCATION_UNIT[int(float(self.compute_capability))]
        shared_per_block = -(-(shared_bytes + reserved) // unit) * unit
        limits = {"warps": self.max_warps_per_sm // warps,
                  "registers": warps_by_registers // warps,
                  "shared memory": (self.shared_per_sm_kib * 1024 // shared_per_block
                                    if shared_bytes else self.max_blocks_per_sm),
                  "blocks": self.max_blocks_per_sm}
        if shared_bytes > self.shared_per_block_kib * 1024:
            limits["shared memory"] = 0
        blocks = min(limits.values())
        return {"blocks": blocks, "warps": blocks * warps, "occupancy": blocks * warps / self.max_warps_per_sm,
                # the steps of the arithmetic, for a row worked by hand
                "warps_per_block": warps, "registers_per_warp": per_warp,
                "warps_per_quarter": self.registers_per_sm // SUB_PARTITIONS // per_warp,
                "shared_per_block": shared_per_block if shared_bytes else 0,
                "limited_by": [k for k, v in limits.items() if v == blocks], **{f"by_{k.replace(' ', '_')}": v
                                                                                 for k, v in limits.items()}}


ARCHITECTURES = {a.compute_capability: a for a in [
    Architecture("7.0", "Volta", 65536, 255, 64, 32, 96, 96, 64, 128),
    Architecture("7.5", "Turing", 65536, 255, 32, 16, 64, 64, 64, 96),
    Architecture("8.0", "Ampere (A100)", 65536, 255, 64, 32, 164, 163, 64, 192),
    Architecture("8.6", "Ampere (GA10x)", 65536, 255, 48, 16, 100, 99, 128, 128),
    Architecture("8.9", "Ada Lovelace", 65536, 255, 48, 24, 100, 99, 128, 128),
    Architecture("9.0", "Hopper", 65536, 255, 64, 32, 228, 227, 128, 256),
]}


@dataclass(frozen=True)
class GPU:
    """One product's datasheet figures."""

    match: str                       # a substring of the name CUDA reports
    product: str
    compute_capability: str
    sms: int
    boost_clock_mhz: int
    memory_gb: float
    memory_gbs: float                # device memory bandwidth, GB/s
    l2_mb: float
    fp32_tflops: float               # CUDA cores
    tf32_tensor_tflops: float        # tensor cores, dense
    fp16_tensor_tflops: float        # tensor cores, dense, fp32 accumulation
    source: str

    @property
    def architecture(self) -> Architecture:
        return ARCHITECTURES[self.compute_capability]


_H100 = "NVIDIA H100 Tensor Core GPU datasheet and architecture whitepaper"
GPUS = [
    GPU("H100 80GB HBM3", "H100 SXM5 80GB", "9.0", 132, 1980, 80, 3350, 50, 66.9, 494.7, 989.4, _H100 + " (SXM5)"),
    GPU("H100 PCIe", "H100 PCIe 80GB", "9.0", 114, 1755, 80, 2000, 50, 51.2, 378.0, 756.0, _H100 + " (PCIe)"),
    GPU("H100 NVL", "H100 NVL 94GB", "9.0", 132, 1785, 94, 3900, 50, 60.0, 417.5, 835.5, _H100 + " (NVL)"),
    GPU("H200", "H200 SXM 141GB", "9.0", 132, 1980, 141, 4800, 50, 66.9, 494.7, 989.4, "NVIDIA H200 datasheet"),
    GPU("A100-SXM4-80GB", "A100 SXM4 80GB", "8.0", 108, 1410, 80, 2039, 40, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    GPU("A100-SXM4-40GB", "A100 SXM4 40GB", "8.0", 108, 1410, 40, 1555, 40, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    GPU("A100-PCIE", "A100 PCIe", "8.0", 108, 1410, 80, 1935, 40, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    GPU("L4", "L4", "8.9", 58, 2040, 24, 300, 48, 30.3, 60.0, 121.0, "NVIDIA L4 datasheet"),
    GPU("Tesla T4", "T4", "7.5", 40, 1590, 16, 320, 4, 8.1, 0.0, 65.0, "NVIDIA T4 datasheet"),
    GPU("V100", "V100 SXM2", "7.0", 80, 1530, 32, 900, 6, 15.7, 0.0, 125.0, "NVIDIA V100 datasheet (SXM2)"),
]


@dataclass(frozen=True)
class Link:
    """A link between GPUs, per GPU: the vendor's bandwidth in one direction
    (vendors often quote both directions added together: ``bidirectional_gbs``)."""

    name: str
    gbs_per_direction: float         # GB/s (10^9 bytes/s) one way, per GPU
    bidirectional_gbs: float         # the figure as the vendor quotes it
    source: str


#: Links the multigpu chapter's cost model reads (its predictions for 8 GPUs and 2 nodes).
LINKS = {
    "nvlink4": Link("NVLink 4 (H100/H200 SXM: 18 links per GPU, through NVSwitch in an 8-GPU HGX board)",
                    450.0, 900.0, "NVIDIA H200 datasheet ('NVIDIA NVLink: 900GB/s'; the H100 SXM "
                    "datasheet gives the same); 900 GB/s is both directions together"),
    "pcie5": Link("PCIe Gen5 x16", 64.0, 128.0,
                  "NVIDIA H200 datasheet ('PCIe Gen5: 128GB/s'), both directions together"),
    "ndr400": Link("InfiniBand NDR, one 400 Gb/s ConnectX-7 port per GPU", 50.0, 100.0,
                   "NVIDIA DGX H200 datasheet (networking: 8x single-port NVIDIA ConnectX-7 VPI, up to "
                   "400Gb/s InfiniBand/Ethernet): 400 Gb/s = 50 GB/s each way per GPU"),
}


def lookup(gpu_name: str) -> GPU | None:
    """The datasheet entry whose ``match`` occurs in ``gpu_name``, or None."""
    for gpu in GPUS:
        if gpu.match.lower() in gpu_name.lower():
            return gpu
    return None


def architecture(compute_capability: str) -> Architecture:
    """The limits of ``compute_capability`` ("9.0"), or a clear error."""
    try:
        return ARCHITECTURES[str(compute_capability)]
    except KeyError:
        raise KeyError(f"no datasheet limits for compute capability {compute_capability!r}; "
                       f"the lab has {sorted(ARCHITECTURES)}") from None


def h100() -> dict:
    """The H100 SXM's facts the book quotes, flat (for ``glue``): the product's
    figures, its architecture's limits, the shared facts, and derived ones
    (the FP32 peak from lanes x 2 FLOP x clock, the ridge point)."""
    gpu = lookup("H100 80GB HBM3")
    arch = gpu.architecture
    facts = {**{k: v for k, v in asdict(gpu).items() if k not in ("match", "source")},
             **{k: v for k, v in asdict(arch).items() if k not in ("compute_capability", "source", "name")},
             "architecture": arch.name, "warp_size": WARP_SIZE, "shared_banks": SHARED_BANKS,
             "bank_bytes": BANK_BYTES, "sector_bytes": SECTOR_BYTES, "cache_line_bytes": CACHE_LINE_BYTES,
             "max_threads_per_block": MAX_THREADS_PER_BLOCK,
             "default_shared_per_block_kib": DEFAULT_SHARED_PER_BLOCK_KIB,
             "constant_memory_kib": CONSTANT_MEMORY_KIB, "constant_cache_kib": CONSTANT_CACHE_PER_SM_KIB}
    facts["fp32_tflops_from_clock"] = gpu.sms * arch.fp32_lanes_per_sm * 2 * gpu.boost_clock_mhz / 1e6
    facts["ridge_flop_per_byte"] = gpu.fp32_tflops * 1e12 / (gpu.memory_gbs * 1e9)
    facts["register_file_kib_per_sm"] = arch.registers_per_sm * 4 // 1024
    facts["source"] = gpu.source
    facts["limits_source"] = arch.source
    return facts
