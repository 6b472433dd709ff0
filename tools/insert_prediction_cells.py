"""Insert the prediction-against-measurement cells into the ladder chapters' notebooks.

Idempotent, and safe to re-run on a notebook someone else has edited: each inserted cell carries
``metadata.gpulab_cell`` (its id) and goes after (or before) the first cell whose source contains
its anchor text ("^text": starts with it; "gpulab_cell:id": an inserted cell); a cell already
present is updated and put back at its anchor (same content and place: no change). A missing anchor is an error naming the notebook and the anchor, so a
merge that changed the anchor's cell is noticed, not silently skipped. Prose edits (a phrase
replaced in an existing cell) apply only where the old phrase is still present.

    python tools/insert_prediction_cells.py [--check] [chapter ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import json

BOOK = Path(__file__).resolve().parent.parent / "book"

TABLE_INTRO = (
    "## Did the predictions hold?\n"
    "Every kernel file states, before any measurement, what its step should buy. The table sets "
    "that prediction (read from the file) against the recorded run, and a rule turns each into a "
    "verdict: a claim that a step is \"faster\", \"about the same\" or \"2-3x faster\" is checked "
    "against the measured ratio (the rules are under the table). Where the prediction failed, the "
    "verdict says why, from what the run and its profile show. A failed prediction is not a failed "
    "step: it is where the mental model of the GPU was wrong, and the most useful row to read.")

#: The two AlexNet chapters glue the verdicts of their own steps (one ladder, one run).
_ALEXNET_GLUE = ("from gpulab import predictions\n"
                 "# each step's verdict, its margin and the band it was judged by, quoted after the step's times\n"
                 "predictions.glue_verdicts(alexnet.prediction_table(run, alexnet.CHAPTER_STEPS[\"{chapter}\"]), \"{chapter}\");")


def _alexnet_verdicts(steps: tuple, after: str, chapter: str = "alexnet") -> dict:
    """The verdict cell of an AlexNet section's steps, after the code cell that shows their times
    (each chapter's verdicts glued under its own name: alexnet_verdict_NN, alexnet_hopper_verdict_NN)."""
    if len(steps) == 1:
        source = f"**Prediction:** {{glue:text}}`{chapter}_verdict_{steps[0]}`."
    else:
        source = "\n\n".join(f"**Prediction, step {int(n)}:** {{glue:text}}`{chapter}_verdict_{n}`." for n in steps)
    return {"id": f"verdict-{steps[0]}" + (f"-{steps[-1]}" if len(steps) > 1 else ""), "after": after,
            "type": "markdown", "source": source}


CHAPTERS = {
    "training": [
        # The step-3 lesson: the prose cell about step 3's result, and the evidence after the timeline.
        {"replace": ("{glue:text}`t03` ms (a speedup of {glue:text}`x03` over step 2). The timeline below\n"
                     "shows, from CUDA events recorded around each kernel, what actually overlapped.",
                     "{glue:text}`t03` ms against step 2's {glue:text}`t02` ms: step 3 is "
                     "**slower**, by {glue:text}`slower_pct`, and the prediction failed. The timeline below\n"
                     "shows, from CUDA events recorded around each kernel, what actually overlapped.")},
        {"replace": ("over batch sizes 32 to 2,048, for every step:",
                     "over batch sizes 32 to 2,048, for four steps that span the ladder (each step's own "
                     "table above has its times at every batch size):")},
        {"id": "predictions-glue", "after": "prose.glue(**views.numbers(run))", "type": "code",
         "source": "prose.glue(**views.prediction_numbers(run), **views.streams_numbers(run));"},
        {"id": "streams-breakdown", "after": "views.show(views.overlap_styled, run)", "type": "code",
         "source": "views.show(views.breakdown_pair_table, run, 2, 3)"},
        {"id": "streams-lesson", "after": "gpulab_cell:streams-breakdown", "type": "markdown",
         "source": (
             "**Why the prediction failed.** The transpose of $X$ did run beside the forward product, but "
             "the product, alone on the GPU in step 2 ({glue:text}`z1_alone` ms), took "
             "{glue:text}`z1_beside` ms with the other streams' kernels beside it: it lost "
             "{glue:text}`z1_lost` ms to hide a transpose of {glue:text}`xt_alone` ms. The small kernels "
             "on the second stream got slower still (the table's last column): each time runs from the "
             "moment the kernel's stream reaches it to its end, so it includes the wait for SMs the "
             "product held. Streams let the GPU run "
             "independent kernels at the same time; they do not make an SM or a byte of bandwidth "
             "appear. The forward product alone launches a thread per output, blocks enough for every SM, so "
             "whatever runs beside it takes SM time from it.\n\n"
             "*What would have to be true for streams to help?* Independent work that leaves resources "
             "idle: a copy over PCIe beside a kernel (the copy engines are otherwise idle; the measuring "
             "chapter's section on streams overlaps them), or kernels too small to fill the GPU. Step 3's kernels are neither.\n\n"
             "**Prediction:** {glue:text}`verdict_03`.")},
        *[{"id": f"verdict-{n:02d}", "after": f"views.show(views.step_times, run, {n})", "skip_cells": 1,
           "type": "markdown", "source": f"**Prediction:** {{glue:text}}`verdict_{n:02d}`."}
          for n in (2, 4, 5, 6, 7, 8, 9, 10)],
        {"id": "prediction-table", "before": "## The ladder, side by side with PyTorch", "type": "markdown",
         "source": TABLE_INTRO + (
             " Of the {glue:text}`predictions_judged` predictions the run can judge, "
             "{glue:text}`predictions_held` held and {glue:text}`predictions_failed` did not.")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": "views.show(views.prediction_styled, run)"},
    ],
    "lenet": [
        {"id": "prediction-table", "before": "^## A second GPU: the H200", "type": "markdown",
         "source": TABLE_INTRO + (
             " Here the times are both layers' (convolution, ReLU and pool) at $N$ = 10,000; a claim "
             "about one layer is judged on that layer's time. Step 2 changes only the host side and is "
             "measured in the section on overlapping copies; steps 12, 12h and 13g reuse steps 10, 11 and "
             "13's kernels.")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "if views.batch_note(run, lenet.MAIN_N):   # the predictions are for N = MAIN_N\n"
                    "    print(views.batch_note(run, lenet.MAIN_N))\n"
                    "else:\n"
                    "    display(predictions.styled(views.prediction_table(ladder, lenet.MAIN_N), "
                    "f\"N = {lenet.MAIN_N:,}; \" + run.caption))")},
        {"id": "verdict-10", "before": "^### Exercise 2 (a prediction): what does `__launch_bounds__", "type": "markdown",
         "source": "**Prediction:** {glue:text}`lv_verdict_10`."},
        {"id": "verdict-11", "before": "^## Step 12: the whole forward pass", "type": "markdown",
         "source": "**Prediction:** {glue:text}`lv_verdict_11`."},
    ],
    "convpool": [
        {"id": "prediction-table", "before": "^## Batches of 8 and 32", "type": "markdown",
         "source": TABLE_INTRO + " Here the times are one image's."},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "predictions.styled(views.prediction_table(run, 1), views.caption(run, [1]))")},
        {"id": "verdicts-glue", "after": "run = gpulab.live_or_recorded(convpool.CHAPTER", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "# each step's verdict (one image), its margin and the band it was judged by, quoted after its section\n"
                    "predictions.glue_verdicts(views.prediction_table(run, 1), \"convpool\");")},
        *[{"id": ident, "before": before, "type": "markdown",
           "source": "\n\n".join(f"**Prediction, step {int(n)}:** {{glue:text}}`convpool_verdict_{n}`." for n in steps)}
          for ident, steps, before in [("verdict-01-02", ("01", "02"), "^## Steps 3-5:"),
                                       ("verdict-03-05", ("03", "04", "05"), "^### Exercise 1 (a prediction): the occupancy"),
                                       ("verdict-06", ("06",), "^## Steps 7-8:"),
                                       ("verdict-07-08", ("07", "08"), "^### Tuning the tensor-core tile"),
                                       ("verdict-09", ("09",), "^## Steps 10 and 11:"),
                                       ("verdict-10-11", ("10", "11"), "^## The whole ladder, one image")]],
    ],
    "fcnet": [
        {"id": "prediction-table", "after": 'fcnet.ladder_figure(run, "large"', "type": "markdown",
         "source": TABLE_INTRO + (" Here the times are the large case's; a claim about the small case is "
                                  "judged on the small case's times.")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "predictions.styled(fcnet.prediction_table(run, \"large\"), "
                    "f\"large case ({fcnet.SIZES['large']:,} vectors); \" + run.caption)")},
        {"id": "verdicts-glue", "after": "run = gpulab.live_or_recorded(fcnet.CHAPTER", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "# each step's verdict, its margin and the band it was judged by, quoted at the step's end\n"
                    "predictions.glue_verdicts(fcnet.prediction_table(run, \"large\"), \"fcnet\");")},
        *[{"id": f"verdict-{n:02d}", "before": before, "type": "markdown",
           "source": f"**Prediction:** {{glue:text}}`fcnet_verdict_{n}`."}
          for n, before in [(2, "^## Step 3:"), (3, "^### Exercise 1 (try this now)"),
                            *[(n, f"^## Step {n + 1}:") for n in range(4, 13)], (14, "^## Step 15 ("),
                            (17, "^## Step 18 ("), (18, "^## The ladder, side by side with the vendor libraries")]],
    ],
    "alexnet": [
        # The verdicts are quoted after each step's times: the table gathers them, so its intro is short.
        {"id": "prediction-table", "after": "Steps 1-24, all five layers, N = ", "type": "markdown",
         "source": ("## Did the predictions hold?\n"
                    "The verdicts quoted after each step's times, in one table: each kernel file's prediction "
                    "(read from the file) against the recorded run, by the rules under the table, and where it "
                    "failed, the reason the run and its profile give. A failed prediction is not a failed step: "
                    "it is where the mental model of the GPU was wrong, and the most useful row to read. The "
                    "times are the five layers' at $N$ = 128, or those of the layers (or the one image) a claim "
                    "names; steps 7-13 branch from step 2 and steps 14 on start again from a matrix product, so "
                    "each claim names the step it is measured against. Steps 25-28 have their rows in "
                    "{doc}`../alexnet_hopper/alexnet_hopper`.")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "predictions.styled(alexnet.prediction_table(run, alexnet.CHAPTER_STEPS[\"alexnet\"]),\n"
                    "                   f\"N = {alexnet.MAIN_N}; \" + run.caption)")},
        {"id": "verdicts-glue", "after": "run = gpulab.live_or_recorded(alexnet.CHAPTER", "type": "code",
         "source": _ALEXNET_GLUE.format(chapter="alexnet")},
        # Each section's verdicts after its times, before its "What we learned" says why (steps 14 and
        # 22 quote theirs in it: s14_verdict, s22_verdict).
        *[_alexnet_verdicts(steps, after) for steps, after in [
            (("02", "03", "04", "05", "06"), "shown = per_layer.loc[[s.label for s in alexnet.STEPS[:6]]]"),
            (("07", "08", "09"), 'channel_steps = ["02", "07", "08", "09"]'),
            (("10",), 'layer1 = ladder[(ladder["layer"] == 1) & ladder["step"].isin(["02", "10"])]'),
            (("11", "12", "13"), 'best_direct = fastest(alexnet.MAIN_N, report_ladder, "fp32")'),
            (("15", "16"), "tensor_columns = ["),
            (("17",), 'resources = alexnet.step_labels(run.tables["resources"])'),
            (("18", "19", "20"), 'cudnn = vendor.set_index("precision")'),
            (("21",), 'glue(s21_ms=ms("21")'),
            (("23", "24"), "values, tables = alexnet.views.winograd_times(")]],
    ],
    "alexnet_hopper": [
        {"id": "prediction-table", "after": "Every step, all five layers, N = ", "type": "markdown",
         "source": TABLE_INTRO + (" Here the times are the five layers' at $N$ = 128, as in "
                                  "{doc}`../alexnet/alexnet`, whose table has the rows of steps 1-24; each "
                                  "claim names the step it is measured against (\"vs previous\" is "
                                  "against the ladder's step before).")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "predictions.styled(alexnet.prediction_table(run, alexnet.CHAPTER_STEPS[\"alexnet_hopper\"]),\n"
                    "                   f\"N = {alexnet.MAIN_N}; \" + run.caption)")},
        {"id": "verdicts-glue", "after": "run = gpulab.live_or_recorded(alexnet.CHAPTER", "type": "code",
         "source": _ALEXNET_GLUE.format(chapter="alexnet_hopper")},
        *[_alexnet_verdicts(steps, after, "alexnet_hopper") for steps, after in [
            (("25",), "wgmma_columns = ["), (("26",), "float_profile = ("),
            (("27",), "values, table = alexnet.views.step27("), (("28",), "values, table = alexnet.views.step28(")]],
    ],
    "measuring": [
        {"id": "prediction-table", "before": "^**What we learned.** At large sizes both of our kernels",
         "type": "markdown",
         "source": ("**Did the prediction hold?** Step 2's kernel file predicted its result before it was "
                    "measured; the table sets that prediction against the run, and a stated rule turns it "
                    "into a verdict (the rules are under the table). The later chapters' ladders each end "
                    "with a table like this one.")},
        {"id": "prediction-table-code", "after": "gpulab_cell:prediction-table", "type": "code",
         "source": ("from gpulab import predictions\n"
                    "table = saxpy.prediction_table(run)\n"
                    "predictions.glue_verdicts(table, \"measuring\")   # each step's verdict, with its margin and band\n"
                    "predictions.styled(table, run.caption)")},
        {"id": "verdict-02", "after": "^**What we learned.** At large sizes both of our kernels", "type": "markdown",
         "source": "**Prediction:** {glue:text}`measuring_verdict_2`."},
    ],
}


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _new_cell(kind: str, ident: str, text: str) -> dict:
    meta = {"gpulab_cell": ident}
    if kind == "code":
        return {"cell_type": "code", "execution_count": None, "id": f"gpulab-{ident}", "metadata": meta,
                "outputs": [], "source": _lines(text)}
    return {"cell_type": "markdown", "id": f"gpulab-{ident}", "metadata": meta, "source": _lines(text)}


def _find(cells, anchor: str, where: str) -> int:
    if anchor.startswith("gpulab_cell:"):
        ident = anchor.split(":", 1)[1]
        hits = [i for i, c in enumerate(cells) if c.get("metadata", {}).get("gpulab_cell") == ident]
    elif anchor.startswith("^"):      # a cell that starts with the text (a section's heading)
        hits = [i for i, c in enumerate(cells) if _source(c).lstrip().startswith(anchor[1:])]
    else:
        hits = [i for i, c in enumerate(cells) if anchor in _source(c)]
    if not hits:
        raise SystemExit(f"{where}: no cell contains the anchor {anchor!r}; update "
                         "tools/insert_prediction_cells.py to the notebook's new text")
    return hits[0]


def apply(chapter: str, check: bool = False) -> bool:
    """Apply the chapter's edits; return True if the notebook changed (with ``check``: would change).
    The notebook is read and written as plain JSON (indent 1, as Jupyter writes it), so cells this
    script does not touch keep their bytes."""
    path = BOOK / chapter / f"{chapter}.ipynb"
    before = path.read_text()
    nb = json.loads(before)
    cells = nb["cells"]
    for edit in CHAPTERS[chapter]:
        if "replace" in edit:
            old, new = edit["replace"]
            for c in cells:
                if old in _source(c):
                    c["source"] = _lines(_source(c).replace(old, new))
            continue
        existing = [c for c in cells if c.get("metadata", {}).get("gpulab_cell") == edit["id"]]
        if existing:
            # Re-anchored since it was inserted: take it out and insert it again where it belongs.
            cell = existing[0]
            if _source(cell) != edit["source"]:
                cell["source"] = _lines(edit["source"])
            cells.remove(cell)
        else:
            cell = _new_cell(edit["type"], edit["id"], edit["source"])
        if "after" in edit:
            at = _find(cells, edit["after"], str(path)) + 1 + edit.get("skip_cells", 0)
        else:
            at = _find(cells, edit["before"], str(path))
        cells.insert(at, cell)
    after = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    changed = after != before
    if changed and not check:
        path.write_text(after)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", default=list(CHAPTERS))
    parser.add_argument("--check", action="store_true", help="exit 1 if a notebook lacks the cells")
    args = parser.parse_args(argv)
    changed = [ch for ch in args.chapters if apply(ch, check=args.check)]
    for ch in changed:
        print(f"{'would change' if args.check else 'changed'}: book/{ch}/{ch}.ipynb")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
