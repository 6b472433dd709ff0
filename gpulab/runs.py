"""Recorded GPU runs: what the book shows on machines without a GPU.

``python -m gpulab record CHAPTER`` runs a chapter's benchmarks on the GPU and
writes ``labdata/runs/<gpu>/<chapter>.csv`` (tidy long form, one row per
measured region; see :data:`gpulab.timing.TIMING_COLUMNS`) and
``<chapter>.meta.json`` (the GPU, driver, CUDA, CuPy, date, clocks). Several
GPUs' runs sit side by side, one folder each. Every figure drawn from a run
carries its :attr:`RecordedRun.caption`.
"""
from __future__ import annotations

import json
import re

import numpy as np
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import paths
from .device import GpuMonitor, describe, gpu_available
from .errors import RecordedRunError
from .timing import TIMING_COLUMNS

REQUIRED_META = ("gpu", "date", "driver", "cuda_runtime", "cupy")
NUMERIC_COLUMNS = ("size", "median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "repeats", "flops", "bytes")
#: What a table shows where a row has no value in a column, instead of "nan"; the caption
#: says why (:func:`gap_note`).
NOT_MEASURED = "—"


def gap_note(table: pd.DataFrame, why: str, caption: str = "") -> str:
    """``caption``, led by the note for ``table``'s empty cells ("—: why") when it has any."""
    if not table.isna().to_numpy().any():
        return caption
    return f"{NOT_MEASURED}: {why}" + (f"; {caption}" if caption else "")


def gpu_slug(name: str) -> str:
    """A folder name for a GPU: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass
class RecordedRun:
    """One chapter's measurements on one GPU."""

    chapter: str
    timings: pd.DataFrame
    meta: dict
    live: bool = False       # measured in this process rather than loaded from labdata/
    path: Path | None = None
    #: Side tables recorded with the run (e.g. "resources", "profile"): free-form
    #: DataFrames saved as ``<chapter>.<name>.csv`` beside the timings.
    tables: dict = field(default_factory=dict)

    @property
    def gpu(self) -> str:
        return self.meta["gpu"]

    @property
    def caption(self) -> str:
        """Which GPU, when, and with which software: printed under every figure."""
        m = self.meta
        how = "measured live" if self.live else "recorded"
        return (f"{m['gpu']}, {how} {m['date']}; driver {m['driver']}, CUDA {m['cuda_runtime']}, "
                f"CuPy {m['cupy']}{self.timing_method}")

    @property
    def timing_method(self) -> str:
        """How the run's calls were timed, for the caption (see book/appendix/timing.md): queued
        behind a guard kernel, or, in runs made before the queued loop, with the host waiting
        before each call, its dispatch inside the events; and the power limit, where recorded."""
        conditions = self.meta.get("conditions") or {}
        limit = conditions.get("power_limit_w")
        form = str(conditions.get("form_factor") or "").split(" (")[0]
        power = (f", {form}" if form else "") + (f", power limit {limit:g} W" if limit else "")
        vendor = ", ".join(f"{name} {version}" for name, version in (
            ("cuBLAS", conditions.get("cublas")), ("cuDNN", _cudnn_version(conditions.get("cudnn"))),
            ("PyTorch", conditions.get("torch"))) if version)
        power += f"; {vendor}" if vendor else ""
        if "queued" in self.timings.columns:
            return f"; calls queued (host dispatch excluded){power}"
        return "; host waited before each call (dispatch included: an earlier method)" + power

    def table(self, experiment: str, columns=("variant", "size", "phase", "median_ms", "q1_ms",
                                              "q3_ms", "min_ms", "max_ms", "repeats")):
        """An experiment's rows as a table captioned with the GPU and date."""
        rows = self.experiment(experiment)
        shown = rows[[c for c in columns if c in rows.columns]]
        return shown.style.format(precision=4, thousands=",").hide(axis="index").set_caption(self.caption)

    def experiment(self, name: str) -> pd.DataFrame:
        """The rows of one experiment, or a clear error listing those present."""
        rows = self.timings[self.timings["experiment"] == name]
        if rows.empty:
            raise RecordedRunError(
                f"the {self.chapter} run on {self.gpu} has no '{name}' rows; it has: "
                f"{', '.join(sorted(self.timings['experiment'].unique()))}. Re-record it with "
                f"`python -m gpulab record {self.chapter}` on a GPU machine")
        return rows.reset_index(drop=True)


def _cudnn_version(number) -> str | None:
    """cuDNN's version number as its release (91900: 9.19.0; cudnnGetVersion's major * 10000 +
    minor * 100 + patch since cuDNN 9), or None when not recorded."""
    try:
        n = int(number)
    except (TypeError, ValueError):
        return str(number) if number else None
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}" if n >= 10000 else str(n)


#: A C or C++ comment, or a string literal (kept: a "//" inside one is not a comment).
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def code_digest(source: str) -> str:
    """sha256 of a kernel source's code: its comments removed and its white space collapsed, so
    that a run recorded from a file still matches it after an edit to its comments alone (the
    files' exact sha256, ``kernel_sources_sha256``, changes with every edit)."""
    import hashlib
    code = _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", source)
    return hashlib.sha256(" ".join(code.split()).encode()).hexdigest()


def run_dir(gpu: str, root: Path | None = None) -> Path:
    return (root or paths.RUNS) / gpu_slug(gpu)


def save_run(chapter: str, rows: list[dict] | pd.DataFrame, meta: dict | None = None,
             root: Path | None = None, tables: dict | None = None) -> Path:
    """Validate and write a chapter's rows, side tables and metadata; return the CSV path."""
    meta = dict(meta or describe())
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    _validate_frame(frame, f"rows for chapter '{chapter}'")
    _validate_meta(meta, f"metadata for chapter '{chapter}'")
    folder = run_dir(meta["gpu"], root)
    folder.mkdir(parents=True, exist_ok=True)
    extra = [c for c in frame.columns if c not in TIMING_COLUMNS]
    csv_path = folder / f"{chapter}.csv"
    frame[TIMING_COLUMNS + extra].to_csv(csv_path, index=False, float_format="%.6g")
    # Text columns are listed so that reading keeps them text: "01" stays "01".
    string_columns = {"timings": _text_columns(frame)}
    for name, table in (tables or {}).items():
        if not re.fullmatch(r"[a-z0-9_]+", name):
            raise ValueError(f"table names are lower-case words, got {name!r}")
        table = pd.DataFrame(table)
        table.to_csv(folder / f"{chapter}.{name}.csv", index=False, float_format="%.6g")
        string_columns[name] = _text_columns(table)
    meta["chapter"] = chapter
    meta["tables"] = sorted(tables or {})
    meta["string_columns"] = string_columns
    (folder / f"{chapter}.meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return csv_path


def available_runs(root: Path | None = None) -> pd.DataFrame:
    """Every recorded run: one row per (gpu folder, chapter) with its date."""
    root = root or paths.RUNS
    rows = []
    for meta_path in sorted(root.glob("*/*.meta.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            meta = {}
        rows.append({"folder": meta_path.parent.name, "chapter": meta_path.name[:-len(".meta.json")],
                     "gpu": meta.get("gpu", "?"), "date": meta.get("date", "?")})
    return pd.DataFrame(rows, columns=["folder", "chapter", "gpu", "date"])


#: The GPU whose recorded runs the book's text, targets and exercises were written from: without
#: ``gpu``, :func:`load_run` reads this GPU's run of a chapter when there is one, so recording the
#: chapter on a second GPU (an H200, say) adds a comparison instead of changing the book.
BOOK_GPU = "H100"


def load_run(chapter: str, gpu: str | None = None, root: Path | None = None) -> RecordedRun:
    """Load a recorded run of ``chapter``. ``gpu`` (a name or folder) picks one
    when several GPUs have run it; without it, the :data:`BOOK_GPU`'s run if the
    chapter has one, else the most recent run."""
    root = root or paths.RUNS
    # A Chapter object compares equal to its name, but pandas 3's Arrow strings compare only
    # with strings (NotImplementedError on the device image's pandas, 2026-12-07).
    chapter = str(chapter)
    runs = available_runs(root)
    runs = runs[runs["chapter"] == chapter]
    if gpu is None and runs["gpu"].str.contains(BOOK_GPU, case=False, regex=False).any():
        gpu = BOOK_GPU
    if gpu is not None:      # a folder, a full name, or part of one ("H200")
        runs = runs[(runs["folder"] == gpu_slug(gpu)) | (runs["gpu"] == gpu)
                    | runs["gpu"].str.contains(str(gpu), case=False, regex=False)]
    if runs.empty:
        have = available_runs(root)
        listed = ", ".join(f"{r.chapter} on {r.gpu}" for r in have.itertuples()) or "none"
        which = f" on '{gpu}'" if gpu else ""
        raise RecordedRunError(
            f"no recorded run of chapter '{chapter}'{which} under {root} (recorded runs: {listed}). "
            f"Record one on a GPU machine with `python -m gpulab record {chapter}`")
    folder = root / runs.sort_values("date").iloc[-1]["folder"]
    return read_run(folder / f"{chapter}.csv")


def compare_runs(chapter: str, root: Path | None = None) -> pd.DataFrame:
    """Every GPU's recorded run of ``chapter`` in one frame, with ``gpu`` and
    ``date`` columns, for side-by-side plots (``label="gpu"``)."""
    root = root or paths.RUNS
    # A Chapter object compares equal to its name, but pandas 3's Arrow strings compare only
    # with strings (NotImplementedError on the device image's pandas, 2026-12-07).
    chapter = str(chapter)
    runs = available_runs(root)
    runs = runs[runs["chapter"] == chapter]
    if runs.empty:
        return load_run(chapter, root=root).timings  # raises the usual clear error
    frames = []
    for entry in runs.itertuples():
        run = read_run(root / entry.folder / f"{chapter}.csv")
        frames.append(run.timings.assign(gpu=run.gpu, date=run.meta["date"]))
    return pd.concat(frames, ignore_index=True)


def read_run(csv_path: Path) -> RecordedRun:
    """Read one run's CSV and its ``.meta.json``, checking both."""
    csv_path = Path(csv_path)
    chapter = csv_path.stem
    meta_path = csv_path.with_name(f"{chapter}.meta.json")
    for needed in (csv_path, meta_path):
        if not needed.is_file():
            raise RecordedRunError(f"recorded run file {needed} is missing; re-record with "
                                   f"`python -m gpulab record {chapter}` on a GPU machine")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise RecordedRunError(f"{meta_path} is not valid JSON: {exc}") from None
    text = meta.get("string_columns", {})
    try:
        frame = pd.read_csv(csv_path, dtype={c: str for c in text.get("timings", [])})
    except Exception as exc:
        raise RecordedRunError(f"{csv_path} is not a readable CSV: {exc}") from None
    _validate_frame(frame, str(csv_path))
    _validate_meta(meta, str(meta_path))
    tables = {}
    for name in meta.get("tables", []):
        table_path = csv_path.with_name(f"{chapter}.{name}.csv")
        if not table_path.is_file():
            raise RecordedRunError(f"{meta_path} lists the table '{name}' but {table_path} is missing")
        tables[name] = pd.read_csv(table_path, dtype={c: str for c in text.get(name, [])})
    return RecordedRun(chapter=chapter, timings=frame, meta=meta, path=csv_path, tables=tables)


def live_or_recorded(chapter: str, measure, gpu: str | None = None) -> RecordedRun:
    """Measure now when a GPU is usable, else load the recorded run: the one
    call every chapter makes before its figures. ``measure()`` returns timing
    rows, or a pair (rows, {table name: DataFrame}). ``gpu`` picks the recorded
    run read without a GPU ("H100", "H200", a full name or folder; None: the
    newest). The GPU's clocks, temperature and throttle reasons before, during
    and after a live measurement go into its metadata (``gpu_state``)."""
    if gpu_available():
        meta = describe()
        with GpuMonitor() as monitor:
            result = measure()
        meta["gpu_state"] = monitor.summary()
        rows, tables = result if isinstance(result, tuple) else (result, {})
        return RecordedRun(chapter=chapter, timings=pd.DataFrame(rows), meta=meta, live=True,
                           tables={k: pd.DataFrame(v) for k, v in tables.items()})
    return load_run(chapter, gpu)


def _text_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])
            and not pd.api.types.is_bool_dtype(frame[c])]


def _validate_frame(frame: pd.DataFrame, where: str) -> None:
    missing = [c for c in TIMING_COLUMNS if c not in frame.columns]
    if missing:
        raise RecordedRunError(f"{where} lacks the columns {missing}; every run needs {TIMING_COLUMNS}")
    if frame.empty:
        raise RecordedRunError(f"{where} has no rows")
    for column in NUMERIC_COLUMNS:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise RecordedRunError(f"{where}: column '{column}' must be numeric, found values like "
                                   f"{frame[column].iloc[0]!r}")
    if (frame["median_ms"] < 0).any() or frame["median_ms"].isna().any():
        raise RecordedRunError(f"{where}: median_ms must be a non-negative number in every row")


def _validate_meta(meta: dict, where: str) -> None:
    missing = [k for k in REQUIRED_META if not meta.get(k)]
    if missing:
        raise RecordedRunError(f"{where} lacks {missing}; a run must say which GPU, when and with "
                               "which software it was measured")
    if str(meta["gpu"]).startswith("none"):
        raise RecordedRunError(f"{where} was not measured on a GPU ({meta['gpu']})")


def recorded_beside(run: RecordedRun, root: Path | None = None) -> dict:
    """The recorded runs of ``run``'s chapter on every GPU, {GPU name: RecordedRun},
    to draw beside a live run (empty when ``run`` is itself a recorded run)."""
    if not run.live:
        return {}
    root = root or paths.RUNS
    found = available_runs(root)
    out = {}
    for entry in found[found["chapter"] == str(run.chapter)].itertuples():
        try:
            other = read_run(root / entry.folder / f"{run.chapter}.csv")
        except RecordedRunError:
            continue
        out[other.gpu] = other
    return out


def gpu_pair(chapter: str, a: str = "H100", b: str = "H200", root: Path | None = None):
    """The recorded runs of ``chapter`` on two GPUs (names matched by substring,
    e.g. "H100" and "H200"), or None when either is missing."""
    root = root or paths.RUNS
    found = available_runs(root)
    found = found[found["chapter"] == str(chapter)]
    picked = []
    for key in (a, b):
        match = found[found["gpu"].str.contains(key, case=False, regex=False)]
        if match.empty:
            return None
        picked.append(read_run(root / match.sort_values("date").iloc[-1]["folder"] / f"{chapter}.csv"))
    return tuple(picked)


#: A step reaching less than this share of both its roofs is latency-bound: the roofline
#: predicts nothing for it, and a GPU with the same SMs and clocks runs it about as fast.
LATENCY_BOUND_USE = 0.2


def gpu_ratio_table(rows_a: pd.DataFrame, rows_b: pd.DataFrame, gpu_a: str, gpu_b: str,
                    keys=("variant",)) -> pd.DataFrame:
    """Per step (rows matched on ``keys``), the time on ``gpu_b`` over the time on
    ``gpu_a``, beside the roofline's prediction from the package's datasheet table
    (:data:`gpulab.roofline.DATASHEET`): a step whose FLOPs and bytes put it
    nearer the memory roof than the FP32 roof on ``gpu_a`` (achieved bandwidth
    over peak, against achieved FLOP/s over peak) is memory-bound and should
    speed up by the bandwidth ratio; a compute-bound one by the FP32-rate ratio."""
    from .roofline import datasheet
    sheet_a, sheet_b = datasheet(gpu_a), datasheet(gpu_b)
    if sheet_a is None or sheet_b is None:
        missing = gpu_a if sheet_a is None else gpu_b
        raise RecordedRunError(f"the datasheet table (gpulab.roofline.DATASHEET) has no entry for {missing}")
    keys = list(keys)
    merged = rows_a.merge(rows_b, on=keys, suffixes=("_a", "_b"))
    if merged.empty:
        raise RecordedRunError(f"the runs on {gpu_a} and {gpu_b} have no rows in common on {keys}")
    seconds = merged["median_ms_a"] / 1e3
    precision = merged["precision_a"] if "precision_a" in merged else pd.Series("fp32", index=merged.index)
    peak_key = precision.map({"tf32": "tf32_tensor_tflops", "fp16": "fp16_tensor_tflops",
                              "bf16": "fp16_tensor_tflops"}).fillna("fp32_tflops")
    peak_a = peak_key.map(sheet_a).astype(float)
    peak_b = peak_key.map(sheet_b).astype(float)
    memory_use = merged["bytes_a"] / seconds / (sheet_a["memory_gbs"] * 1e9)
    compute_use = merged["flops_a"] / seconds / (peak_a * 1e12)
    bound = np.where(np.maximum(memory_use, compute_use) < LATENCY_BOUND_USE, "latency",
                     np.where(memory_use >= compute_use, "memory", "compute"))
    predicted = np.where(bound == "memory", sheet_a["memory_gbs"] / sheet_b["memory_gbs"],
                         np.where(bound == "compute", peak_a / peak_b, 1.0))
    table = merged[keys].assign(time_a_ms=merged["median_ms_a"], time_b_ms=merged["median_ms_b"],
                                ratio=merged["median_ms_b"] / merged["median_ms_a"], predicted=predicted,
                                bound=bound, memory_use_a=memory_use, compute_use_a=compute_use)
    table.attrs.update(a=gpu_a, b=gpu_b)
    return table


def gpu_comparison_caption(run_a: RecordedRun, run_b: RecordedRun) -> str:
    """One caption naming both recorded runs."""
    return f"recorded: {run_a.caption}  |  {run_b.caption}"


def gpu_comparison(chapter: str, select, *, title: str, keys=("variant",), a: str = "H100", b: str = "H200",
                   root: Path | None = None):
    """The second GPU against the first, per step: ``select(run)`` picks the rows
    to compare from each recorded run (e.g. one case of the ladder); returns
    (table, figure), or None when either GPU's run of ``chapter`` is not recorded
    (the figure appears only once both exist)."""
    from . import plots
    pair = gpu_pair(chapter, a, b, root)
    if pair is None:
        return None
    run_a, run_b = pair
    table = gpu_ratio_table(select(run_a), select(run_b), run_a.gpu, run_b.gpu, keys)
    table.attrs["caption"] = gpu_comparison_caption(run_a, run_b)     # for the table shown beside the figure
    figure = plots.gpu_ratio(table, title=title, caption=table.attrs["caption"])
    return table, figure


def gpu_comparison_summary(table: pd.DataFrame) -> dict:
    """What a chapter's prose says about a :func:`gpu_ratio_table`: how many steps are
    memory-bound and the range of their ratios against the prediction, the range of the
    others' ratios, and the memory-bound step furthest from its prediction (NaN or ""
    where a group is empty), as plain values for :func:`gpulab.prose.glue`."""
    memory, other = table[table["bound"] == "memory"], table[table["bound"] != "memory"]
    out = {"n_memory": len(memory), "n_other": len(other),
           "memory_ratio_min": float(memory["ratio"].min()) if len(memory) else float("nan"),
           "memory_ratio_max": float(memory["ratio"].max()) if len(memory) else float("nan"),
           "other_ratio_min": float(other["ratio"].min()) if len(other) else float("nan"),
           "other_ratio_max": float(other["ratio"].max()) if len(other) else float("nan"),
           "furthest_variant": "", "furthest_ratio": float("nan"), "furthest_predicted": float("nan"),
           "furthest_memory_use": float("nan")}
    if len(memory):
        worst = memory.loc[(memory["ratio"] - memory["predicted"]).abs().idxmax()]
        out.update(furthest_variant=str(worst[table.columns[0]]), furthest_ratio=float(worst["ratio"]),
                   furthest_predicted=float(worst["predicted"]), furthest_memory_use=float(worst["memory_use_a"]))
    return out
