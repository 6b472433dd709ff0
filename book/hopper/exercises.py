"""The hopper chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
import numpy as np

from gpulab.exercises import Exercise


def _inputs_1(case: dict) -> dict:
    """Byte offsets into a swizzled tile: a whole 1024-byte tile, 16-byte chunk starts, or random
    offsets (any byte, several tiles on)."""
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        return {"offsets": rng.integers(0, case.get("span", 8192), 64), "swizzle": case["swizzle"]}
    return {"offsets": np.arange(0, case.get("span", 1024), case.get("stride", 16)), "swizzle": case["swizzle"]}


def _inputs_2(case: dict) -> dict:
    """A valid sequence of mbarrier events over ``phases`` phases of a barrier of ``count``
    arrivals (one arrival announcing ``tx`` bytes in each phase when ``tx``, landing in pieces),
    with waits of random parity anywhere."""
    rng = np.random.default_rng(case["seed"])
    count, events = case["count"], []
    for _ in range(case["phases"]):
        phase = [["arrive", 1]] * (count - 1)
        if case.get("tx"):
            cuts = np.sort(rng.choice(np.arange(1, case["tx"]), 2, replace=False))
            pieces = np.diff([0, *cuts, case["tx"]])
            first = [["arrive_expect_tx", int(case["tx"])]]
            rest = [*phase, *[["complete_tx", int(b)] for b in pieces]]
            rng.shuffle(rest)
            phase = first + list(rest)
        else:
            phase = phase + [["arrive", 1]]
        for event in phase:
            if rng.random() < 0.4:
                events.append(["wait", int(rng.integers(0, 2))])
            events.append(list(event))
        events.append(["wait", int(rng.integers(0, 2))])
    return {"count": count, "events": events}


def _inputs_4(case: dict) -> dict:
    """A tensor to put into e4m3: normal values; magnitudes spread over many decades (values
    below e4m3's smallest normal once scaled); exact ties between two e4m3 values once scaled
    (the largest magnitude 448 times a power of two, so the scale is exact); or all zeros."""
    rng = np.random.default_rng(case.get("seed", 0))
    n = case.get("n", 64)
    if case.get("zeros"):
        return {"x": np.zeros(n)}
    if case.get("ties"):
        e = rng.integers(-6, 8, n)
        m = rng.integers(8, 16, n)
        normal = (m + 0.5) * 2.0 ** (e - 3.0)                 # halfway between two normal values
        sub = (rng.integers(0, 8, n) + 0.5) * 2.0 ** -9        # halfway between two subnormals
        values = np.where(rng.random(n) < 0.3, sub, normal) * rng.choice([-1.0, 1.0], n)
        values[0] = 448.0
        return {"x": values * 2.0 ** float(case["ties"])}
    if case.get("wide"):
        x = 10.0 ** rng.uniform(-7, 2, n) * rng.choice([-1.0, 1.0], n)
    else:
        x = rng.normal(0, case.get("sigma", 1.0), n)
    if case.get("negative_max"):
        x[np.argmax(np.abs(x))] = -2 * np.max(np.abs(x))      # the largest magnitude is negative
    return {"x": x}


def _describe_4(answer: dict) -> str:
    values = np.asarray(answer["values"], dtype=np.float64)
    small = int(np.sum(np.abs(values) < 2.0 ** -6))
    return (f"scale {answer['scale']:.3g}; {values.size} e4m3 values from {values.min():g} to {values.max():g}, "
            f"{small} of them subnormal or zero")


EXERCISES = [
    Exercise("hopper.1", "hopper", "the swizzle as a function of the address", 2, "function",
             "book/hopper/hopper.ipynb", cell="hop-ex1-sol", function="swizzled_offsets",
             signature="swizzled_offsets(offsets, swizzle=128)",
             public=({"swizzle": 128}, {"swizzle": 64, "random": 3}), inputs=_inputs_1, tolerance=0.0,
             hint="XOR, not add; the chunk bits are 4 .. 4 + b - 1 and the bits XORed in start at bit 7 "
                  "for every swizzle (b = 3, 2, 1 for 128, 64, 32 bytes; 0 leaves the offset as it is)."),
    Exercise("hopper.2", "hopper", "an mbarrier's phases", 2, "function",
             "book/hopper/hopper.ipynb", cell="hop-ex2-sol", function="mbarrier_waits",
             signature="mbarrier_waits(count, events)",
             public=({"count": 2, "phases": 3, "seed": 1}, {"count": 1, "phases": 4, "tx": 96, "seed": 2}),
             inputs=_inputs_2, tolerance=0.0,
             hint="A phase completes only when every arrival has come AND every announced byte has landed; "
                  "then the count starts again. wait(p) returns when the current phase's parity is not p."),
]

EXERCISES.append(
    Exercise("hopper.3", "hopper", "step 3's producer (the kernel)", 4, "kernel",
             "kernels/hopper/exercise_03_producer.cu", step="E3",
             public=({"shapes": [(200, 136, 712), (72, 264, 200)], "seed": 0},),
             hint="Slot t % STAGES; wait for empty's phase of parity ((t / STAGES) % 2) ^ 1 (round 0: parity 1, "
                  "which a fresh barrier counts as done); then one mbar_arrive_expect_tx(&full[slot], SLICE_BYTES) "
                  "before the two tma_load_2d, A's box at (t * BK, m0), B's at (t * BK, n0) BM * BK halves further."))

EXERCISES.append(
    Exercise("hopper.4", "hopper", "a tensor into e4m3", 2, "function",
             "book/hopper/hopper.ipynb", cell="hop-ex4-sol", function="quantize_e4m3",
             signature="quantize_e4m3(x)",
             public=({"seed": 1, "n": 64}, {"seed": 2, "n": 64, "wide": True}), inputs=_inputs_4, tolerance=0.0, describe=_describe_4,
             hint="The scale is the largest MAGNITUDE over 448 (1 for an all-zero tensor). Round x / scale to "
                  "the nearest e4m3 value, ties to the even mantissa (np.round does ties to even): in [2^e, 2^(e+1)) "
                  "the values are 2^(e-3) apart, and below 2^-6 (the subnormals) they are 2^-9 apart."))
