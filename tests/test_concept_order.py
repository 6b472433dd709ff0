"""No chapter uses an idea before the chapter that teaches it, in the toc's order: each chapter's
declaration (gpulab.concepts) is held to the toc, to the chapter's kernels and to the basics
chapter's table "Where each idea is introduced"."""
import json
import re

import pytest

from gpulab import chapters, concepts, paths

NAMES = chapters.names()


def test_every_chapter_declares_and_every_concept_has_one_teacher_in_the_book():
    assert set(concepts.USES) == set(NAMES)
    keys = [c.key for c in concepts.CONCEPTS]
    assert len(set(keys)) == len(keys) and len({c.label for c in concepts.CONCEPTS}) == len(keys)
    assert {c.taught_in for c in concepts.CONCEPTS} <= set(NAMES)
    for chapter, used in concepts.USES.items():
        assert set(used) <= set(keys), (chapter, set(used) - set(keys))
        assert not set(used) & set(concepts.taught_by(chapter)), f"{chapter} both teaches and uses {used}"
    for concept in concepts.CONCEPTS:
        for mark in concept.marks:
            re.compile(mark)


def test_no_chapter_uses_a_concept_before_the_chapter_that_teaches_it():
    problems = concepts.order_problems()
    unknown = [p for p in problems if p[:2] not in concepts.KNOWN_GAPS]
    assert not unknown, "used before the chapter that teaches it, in _toc.yml's order (chapter, concept, teacher): " \
                        f"{unknown}"
    # a known gap that is closed leaves the list
    assert sorted(concepts.KNOWN_GAPS) == sorted(p[:2] for p in problems)
    assert all(reason for reason in concepts.KNOWN_GAPS.values())


def test_the_order_check_fails_on_the_books_old_order():
    # hopper last, as the toc had it: every chapter on Hopper's machinery came before it
    old = [n for n in NAMES if n != "hopper"] + ["hopper"]
    found = {(chapter, key) for chapter, key, teacher in concepts.order_problems(old) if teacher == "hopper"}
    assert {("alexnet_hopper", "wgmma"), ("alexnet_hopper", "tma"), ("alexnet_hopper", "mbarrier"),
            ("convpool", "wgmma"), ("convpool", "tma"), ("lenet", "wgmma")} <= found


def test_every_kernel_file_belongs_to_one_chapter():
    owned = [f for name in NAMES for f in concepts.kernel_files(name)]
    every = sorted(p.relative_to(paths.KERNELS).as_posix() for p in paths.KERNELS.glob("*/*.cu"))
    assert sorted(owned) == every, set(every) ^ set(owned)
    # the second AlexNet chapter owns its steps' files, the first the rest of kernels/alexnet/
    from gpulab.workloads import alexnet
    mine = set(concepts.kernel_files("alexnet_hopper"))
    assert mine == {alexnet.CHAPTER.step(n).file for n in alexnet.CHAPTER_STEPS["alexnet_hopper"]}
    assert {alexnet.CHAPTER.step(n).file for n in alexnet.CHAPTER_STEPS["alexnet"]} <= set(concepts.kernel_files("alexnet"))
    assert set(alexnet.CHAPTER_STEPS["alexnet"]) | set(alexnet.CHAPTER_STEPS["alexnet_hopper"]) == \
        {s.number for s in alexnet.CHAPTER.steps}


@pytest.mark.parametrize("chapter", NAMES)
def test_a_chapter_declares_every_concept_its_kernels_use(chapter):
    assert concepts.undeclared(chapter) == {}, (
        f"{chapter}'s kernels use these concepts (files named), which gpulab.concepts.USES does not declare")


def test_the_kernel_check_sees_hopper_code_through_the_headers_and_not_in_comments(tmp_path, monkeypatch):
    # alexnet_hopper's step files call conv_wgmma (kernels/common/hopper_conv.cuh): the marks are found
    # in the headers they include; alexnet's own kernels, whose comments name wgmma, carry none of them
    found = concepts.marked("alexnet_hopper")
    assert {"tma", "mbarrier", "wgmma", "warp_specialization", "clusters"} <= set(found)
    assert "common/hopper.h" in found["mbarrier"]
    assert not {"tma", "mbarrier", "wgmma", "warp_specialization", "clusters"} & set(concepts.marked("alexnet"))
    assert "wgmma" in (paths.KERNELS / "lenet" / "13_both_layers_mma.cu").read_text()
    assert "wgmma" not in concepts.marked("lenet")
    # a kernel that writes the instruction itself is caught, and its chapter then must declare it
    folder = tmp_path / "kernels"
    (folder / "demo").mkdir(parents=True)
    (folder / "demo" / "01_step.cu").write_text('// wgmma. here is a comment\n#include "helper.cuh"\n')
    (folder / "demo" / "helper.cuh").write_text('asm volatile("wgmma.fence.sync.aligned;\\n");\n')
    monkeypatch.setattr(paths, "KERNELS", folder)
    concepts._closure.cache_clear()
    try:
        assert concepts.marked("demo") == {"wgmma": ["demo/helper.cuh"]}
        monkeypatch.setitem(concepts.USES, "demo", ())
        assert set(concepts.undeclared("demo")) == {"wgmma"}
    finally:
        concepts._closure.cache_clear()


def _concept_table() -> dict:
    """{idea: where} from the basics chapter's table "Where each idea is introduced"."""
    cells = json.loads((paths.REPO / "book" / "basics" / "basics.ipynb").read_text())["cells"]
    text = next("".join(c["source"]) for c in cells if "## Where each idea is introduced" in "".join(c["source"]))
    table = text[text.index("| idea | where |"):]
    rows = re.findall(r"^\| (.+?) \| (.+) \|$", table.split(":::")[0], re.M)
    return {idea: where for idea, where in rows if idea not in ("idea", "---")}


def _first_chapter(where: str) -> str:
    if where.startswith("this chapter"):
        return "basics"
    found = re.search(r"\{doc\}`(?:[^`<]*<)?\.\./(\w+)/(\w+)>?`", where)
    assert found and found.group(1) == found.group(2), where
    return found.group(1)


def test_the_basics_table_names_each_concepts_teacher_first():
    table = _concept_table()
    assert sorted(table) == sorted(c.label for c in concepts.CONCEPTS), set(table) ^ {c.label for c in concepts.CONCEPTS}
    for concept in concepts.CONCEPTS:
        assert _first_chapter(table[concept.label]) == concept.taught_in, (concept.label, table[concept.label])
    hopper = [c.label for c in concepts.CONCEPTS if c.taught_in == "hopper"]
    assert len(hopper) >= 6 and all("hopper/hopper" in table[label] for label in hopper)


def test_the_table_reader_finds_a_wrong_teacher():
    assert _first_chapter("{doc}`../hopper/hopper`, step 1; used in {doc}`../convpool/convpool`") == "hopper"
    assert _first_chapter("this chapter: banks; used in {doc}`../lenet/lenet`") == "basics"
    assert _first_chapter("{doc}`the chapter <../fcnet/fcnet>`, step 6") == "fcnet"


def test_the_second_alexnet_chapter_points_back_to_the_hopper_chapter():
    def text(name):
        cells = json.loads(chapters.chapter(name).notebook.read_text())["cells"]
        return "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    second = text("alexnet_hopper")
    assert "../hopper/hopper" in second and "../alexnet/alexnet" in second
    assert "../alexnet_hopper/alexnet_hopper" in text("alexnet") and "../alexnet_hopper/alexnet_hopper" in text("hopper")
    # the hopper chapter no longer opens by saying every earlier tensor-core ladder ends below the vendor
    opening = "".join(json.loads(chapters.chapter("hopper").notebook.read_text())["cells"][0]["source"])
    assert "ends below the vendor" not in opening
