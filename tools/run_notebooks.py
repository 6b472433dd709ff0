"""Execute notebooks in parallel and say what a reader would see that they should not.

Each notebook runs in its own kernel (nbclient), in its own folder, as nbmake runs it;
the executed copy is saved under OUT_DIR, partial if a cell failed or timed out. Then
every output is scanned for what a live run must not show:

* anything on stderr (warnings in red boxes) and errors;
* "nan" in a displayed table or text (a cell that should say why it is empty);
* a raw Python dict as a cell's result (a ``glue(...)`` call left as a cell's last line).

Usage: python tools/run_notebooks.py OUT_DIR NOTEBOOK... [--jobs 8] [--timeout 400] [--deadline 420]
(--deadline: seconds from now after which no cell starts, and a running one is stopped, so
every notebook comes back, partial if need be, inside a device call's limit. --gpu-share: each
notebook's CuPy memory limit, e.g. "9%": the chapters size themselves to one GPU's memory, so
without a share notebooks run side by side on one GPU run out of memory.)
Writes OUT_DIR/summary.txt (one block per notebook) and exits 1 if anything was found.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

NAN = re.compile(r"(?<![\w.])nan(?![\w(])", re.IGNORECASE)
TAG = re.compile(r"<[^>]+>")


def execute(path: str, out_dir: str, timeout: int, deadline: float, gpu_share: str | None) -> dict:
    import os

    import nbformat
    from nbclient import NotebookClient
    nb_path = Path(path).resolve()
    nb = nbformat.read(nb_path, as_version=4)
    if gpu_share:
        os.environ["CUPY_GPU_MEMORY_LIMIT"] = gpu_share      # the kernel inherits it
    start, error, index = time.time(), None, 0
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(nb_path.parent)}})
    try:
        with client.setup_kernel():
            for index, cell in enumerate(nb.cells):
                left = deadline - time.time()
                if left < 5:
                    error = f"stopped before cell {index} of {len(nb.cells)}: out of time"
                    break
                client.timeout = int(min(timeout, left))
                client.execute_cell(cell, index)
    except Exception as exc:            # the partial notebook is still saved and scanned
        error = f"{type(exc).__name__} in cell {index}"
    out = Path(out_dir) / nb_path.name
    nbformat.write(nb, out)
    return {"notebook": path, "seconds": round(time.time() - start), "error": error, "findings": scan(nb)}


def scan(nb) -> list[str]:
    """What a reader should not see, one line per finding: 'cell N: kind: excerpt'."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream" and output.get("name") == "stderr":
                found.append(f"cell {index}: stderr: {output.get('text', '')[:300]!r}")
                continue
            if kind == "error":
                found.append(f"cell {index}: error: {output.get('ename')}: {output.get('evalue', '')[:300]}")
                continue
            texts = [output.get("text", "")] if kind == "stream" else []
            data = output.get("data", {})
            if "text/markdown" in data:      # a kernel's source (gpulab.show_source): its comments may say NaN
                continue
            if "text/html" in data:
                texts.append(TAG.sub(" ", "".join(data["text/html"])))
            elif "text/plain" in data:
                plain = "".join(data["text/plain"])
                texts.append(plain)
                if kind == "execute_result" and plain.lstrip().startswith("{'"):
                    found.append(f"cell {index}: dict shown as the cell's result: {plain[:200]!r}")
            for text in texts:
                for match in NAN.finditer(text):
                    around = text[max(0, match.start() - 80):match.end() + 40].replace("\n", " ")
                    found.append(f"cell {index}: nan: {' '.join(around.split())!r}")
                    break
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=400, help="seconds per cell")
    parser.add_argument("--deadline", type=float, default=3600, help="seconds for the whole run")
    parser.add_argument("--gpu-share", default=None, help='CUPY_GPU_MEMORY_LIMIT of each notebook, e.g. "9%%"')
    args = parser.parse_args()
    deadline = time.time() + args.deadline
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "summary.txt"
    summary.write_text("")
    bad = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(execute, nb, str(out), args.timeout, deadline, args.gpu_share) for nb in args.notebooks]
        for future in as_completed(futures):
            r = future.result()
            bad += bool(r["error"] or r["findings"])
            lines = [f"== {r['notebook']}: {'ERROR ' + r['error'] if r['error'] else 'ran'} in {r['seconds']} s, "
                     f"{len(r['findings'])} finding(s)"] + ["   " + f for f in r["findings"]]
            with summary.open("a") as f:
                f.write("\n".join(lines) + "\n")
            print("\n".join(lines), flush=True)
    (out / "summary.json").write_text(json.dumps({"notebooks": len(args.notebooks), "with_findings": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
