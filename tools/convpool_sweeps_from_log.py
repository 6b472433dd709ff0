"""Rebuild the convpool run's ``sweeps`` table from the record's own log.

The run of 2026-11-23 11:15 UTC wrote its three sweep tables as three files; the device machine
returns at most eight files from a call, and these three were the ones left behind. Every point
the sweeps measured is also printed in the record's log (``sweep <params>: <status> <ms> ms``,
in the order the code runs them), so this script rebuilds the table from that log: the points,
their status, the reason (cut at 100 characters in the log) and the median time, and the columns
that follow from the code (blocks per point, Q, step and batch of the tile sweep, shared memory).
What the log does not hold stays empty: quartiles, repeats, relative error, and registers and
occupancy (except registers where a refusal states them). The record now writes one ``sweeps``
table, so a new run needs none of this.

Usage: python tools/convpool_sweeps_from_log.py RECORD_LOG RUN_FOLDER
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from gpulab.workloads.convpool import CHAPTER
from gpulab.workloads.convpool import sweeps as sw
from gpulab.workloads.convpool.launchers import strips, tc_shared_bytes
from gpulab.workloads.convpool.problem import LAYER

LINE = re.compile(r"\] sweep (?P<params>[^:]+): (?P<status>ok|wrong|invalid)(?: (?P<ms>[\d.]+) ms)?"
                  r"(?: \((?P<reason>.*)\))?$")
REGISTERS = re.compile(r"uses (\d+) registers per thread")


def parse(log_text: str) -> list[dict]:
    points = []
    for line in log_text.splitlines():
        match = LINE.search(line)
        if not match:
            continue
        params = dict(item.split("=") for item in match["params"].split(", "))
        ms = float(match["ms"]) if match["ms"] else float("nan")
        points.append({**{k: int(v) for k, v in params.items()}, "status": match["status"],
                       "reason": match["reason"] or "", "median_ms": ms})
    return points


def rebuild(log_text: str) -> pd.DataFrame:
    points = parse(log_text)
    shape_n = len(sw.Q_VALUES) * len(sw.THREADS)
    blocks_n = len(sw.BLOCKS) * len(sw.BLOCK_THREADS)
    tiles_each = len(sw.TILE_PIXELS) * len(sw.STAGES)
    expected = shape_n + blocks_n + tiles_each * 2 * len(sw.TILE_BATCHES)
    if len(points) != expected:
        raise ValueError(f"the log holds {len(points)} sweep points; the record's sweeps have {expected}")
    shape, blocks, tiles = points[:shape_n], points[shape_n:shape_n + blocks_n], points[shape_n + blocks_n:]
    rows = []
    step5 = CHAPTER.step("05")
    for p in shape:
        rows.append({**p, "sweep": "shape", "blocks": strips(replace(step5, options=(f"-DQ={p['Q']}",)), LAYER)})
    q = int(pd.DataFrame(rows).query("status == 'ok'").sort_values("median_ms").iloc[0]["Q"])
    for p in blocks:
        all_strips = strips(replace(step5, options=(f"-DQ={q}",)), LAYER)
        rows.append({**p, "sweep": "blocks", "Q": q, "strips": all_strips, "grid": p["blocks"] or all_strips})
    for i, p in enumerate(tiles):
        N = sw.TILE_BATCHES[i // (2 * tiles_each)]
        step = ("07", "08")[(i // tiles_each) % 2]
        options = (f"-DSTAGES={p['STAGES']}", f"-DTC_BN={p['pixels']}")
        rows.append({**p, "sweep": "tiles", "step": step, "N": N,
                     "shared_bytes": tc_shared_bytes(replace(CHAPTER.step(step), options=options))})
    table = pd.DataFrame(rows)
    table["timed"] = table["status"] == "ok"
    batch = table["N"].fillna(1).astype(int)
    table["gflops"] = LAYER.flops * batch / table["median_ms"] / 1e6
    found = table["reason"].str.extract(REGISTERS)[0].astype(float)
    table["registers"] = found
    # A refusal states the build's registers; every point of that build (same Q) has them.
    for column in ("Q",):
        known = table.dropna(subset=["registers"]).groupby(column)["registers"].first()
        table["registers"] = table["registers"].fillna(table[column].map(known))
    table["source"] = "rebuilt from the record's log"
    return table


def main(log_path: str, folder: str) -> None:
    folder = Path(folder)
    table = rebuild(Path(log_path).read_text())
    table.to_csv(folder / "convpool.sweeps.csv", index=False, float_format="%.6g")
    meta_path = folder / "convpool.meta.json"
    meta = json.loads(meta_path.read_text())
    old = [t for t in meta["tables"] if t.startswith("sweep_")]
    meta["tables"] = sorted([t for t in meta["tables"] if t not in old] + ["sweeps"])
    for name in old:
        meta["string_columns"].pop(name, None)
    meta["string_columns"]["sweeps"] = ["status", "reason", "sweep", "step", "source"]
    meta["notes"] = ("The sweeps table was rebuilt from this run's record log by "
                     "tools/convpool_sweeps_from_log.py: the three sweep files the run wrote were not "
                     "returned by the device machine (at most eight files come back). Quartiles, repeats, "
                     "relative errors, and registers and occupancy except where a refusal states them, are "
                     "not in the log and are empty.")
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"{len(table)} points -> {folder / 'convpool.sweeps.csv'}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
