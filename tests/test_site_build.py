"""How the site is configured: launch buttons only with a repository URL, which the build
writes into the Colab set-up cell (no URL invented, none to edit by hand)."""
import json
import shutil

import yaml

from gpulab import paths, site


def _copy(tmp_path):
    src = tmp_path / "src"
    (src / "book" / "fcnet").mkdir(parents=True)
    shutil.copy(paths.REPO / "_config.yml", src / "_config.yml")
    shutil.copy(paths.REPO / "book/fcnet/fcnet.ipynb", src / "book/fcnet/fcnet.ipynb")
    return src


def test_a_local_build_has_no_launch_buttons(tmp_path):
    src = _copy(tmp_path)
    site.configure(src, repository=None, branch=None, execute=True)
    config = yaml.safe_load((src / "_config.yml").read_text())
    assert not config.get("launch_buttons", {}).get("colab_url")
    assert not config.get("html", {}).get("use_repository_button")
    assert "sphinx-mathjax-offline" in config["sphinx"]["extra_extensions"]      # math without a CDN
    cells = json.loads((src / "book/fcnet/fcnet.ipynb").read_text())["cells"]
    assert all(c.get("id") != site.COLAB_CELL_ID for c in cells)


def test_the_repository_url_goes_into_buttons_and_the_colab_cell(tmp_path):
    src = _copy(tmp_path)
    url = "https://github.com/someone/their-fork"
    site.configure(src, repository=url + ".git", branch="student", execute=False)
    config = yaml.safe_load((src / "_config.yml").read_text())
    assert config["repository"] == {"url": url, "branch": "student", "path_to_book": ""}
    assert config["launch_buttons"]["colab_url"] == site.COLAB_URL
    assert config["execute"]["execute_notebooks"] == "off"
    site.add_colab_cell(src / "book/fcnet/fcnet.ipynb", url, "student")          # a second time: still one
    cells = json.loads((src / "book/fcnet/fcnet.ipynb").read_text())["cells"]
    setup = [c for c in cells if c.get("id") == site.COLAB_CELL_ID]
    assert len(setup) == 1 and cells[1] is not None and cells[1]["id"] == site.COLAB_CELL_ID
    source = "".join(setup[0]["source"])
    assert url in source and "'student'" in source and "/content/gpulab/book/fcnet" in source
    assert setup[0]["metadata"]["tags"] == ["remove-cell"]
    namespace = {}
    exec(compile(source, "colab-setup", "exec"), namespace)      # off Colab it does nothing
    assert "subprocess" not in namespace


def test_without_a_branch_colab_opens_the_student_branch_and_never_the_solutions(tmp_path):
    url = "https://github.com/someone/their-fork"
    for solutions, expected in ((False, site.STUDENT_BRANCH), (True, "main")):
        src = _copy(tmp_path / str(solutions))
        site.configure(src, repository=url, branch=None, execute=False, solutions=solutions)
        assert yaml.safe_load((src / "_config.yml").read_text())["repository"]["branch"] == expected
        cells = json.loads((src / "book/fcnet/fcnet.ipynb").read_text())["cells"]
        setup = "".join(next(c for c in cells if c.get("id") == site.COLAB_CELL_ID)["source"])
        assert f'"--branch", {expected!r}' in setup
    assert site.STUDENT_BRANCH != "main"


def test_the_colab_cell_clones_the_branch_and_installs_the_lab(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    import types

    src = _copy(tmp_path)
    url = "https://github.com/someone/their-fork"
    site.add_colab_cell(src / "book/fcnet/fcnet.ipynb", url, "student")
    cell = next(c for c in json.loads((src / "book/fcnet/fcnet.ipynb").read_text())["cells"]
                if c.get("id") == site.COLAB_CELL_ID)
    calls, moved = [], []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", lambda command, check: calls.append(command))
    monkeypatch.setattr(os.path, "isdir", lambda path: False)
    monkeypatch.setattr(os, "chdir", moved.append)
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile("".join(cell["source"]), "colab-setup", "exec"), {})
    assert calls[0][:2] == ["git", "clone"] and calls[0][-3:] == ["student", url, "/content/gpulab"]
    assert calls[1][-4:] == ["install", "-q", "-e", "/content/gpulab"]
    assert moved == ["/content/gpulab/book/fcnet"] and sys.path[0] == "/content/gpulab"


def test_each_page_loads_each_script_once():
    # Sphinx 7.4 lists an inline script added after the builder started twice (None and ''):
    # sphinx-thebe's THEBE_JS_URL was declared twice on every page.
    from sphinx.builders.html._assets import _JavaScript
    from gpulab import sphinx_assets
    body = 'const THEBE_JS_URL = "x"'
    scripts = [_JavaScript("_static/doctools.js", priority=200), _JavaScript(None, priority=500, body=body),
               _JavaScript("", priority=500, body=body), _JavaScript("", priority=500, body="const other = 1")]
    context = {"script_files": scripts}
    sphinx_assets.load_once(None, "index", "page.html", context, None)
    assert context["script_files"] is scripts and len(scripts) == 3
    assert [s.attributes.get("body") for s in scripts] == [None, body, "const other = 1"]
    config = yaml.safe_load((paths.REPO / "_config.yml").read_text())
    assert "gpulab.sphinx_assets" in config["sphinx"]["extra_extensions"]


def test_the_theme_starts_in_a_mode_it_knows():
    # Without default_mode, pydata-sphinx-theme logs "Got invalid theme mode: ." on a first visit.
    from types import SimpleNamespace
    from gpulab import sphinx_assets
    config = SimpleNamespace(html_context={"github_user": "someone"})
    sphinx_assets.default_mode(None, config)
    assert config.html_context == {"default_mode": "auto", "github_user": "someone"}
    config = SimpleNamespace(html_context={"default_mode": "light"})
    sphinx_assets.default_mode(None, config)
    assert config.html_context == {"default_mode": "light"}
