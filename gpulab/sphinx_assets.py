"""A Sphinx extension of the book's site: pages that log no error in the browser's console.

Each page loads each of its scripts once (:func:`load_once`), and the theme starts in a
mode it knows: pydata-sphinx-theme's script logs "Got invalid theme mode: ." on a
reader's first page when no ``default_mode`` is in the HTML context (it then falls back to
"auto", which is therefore set here, explicitly).

Sphinx 7.4 writes an inline script that an extension adds after the HTML builder has
started into every page twice: the builder keeps it with the file name ``None`` and, when
it prepares writing, adds the registry's copy again as ``''``, which it does not take for
the same script. sphinx-thebe adds one such script while the documents are read
(``const THEBE_JS_URL = ...``), so every page logged "Identifier 'THEBE_JS_URL' has already
been declared" in the browser's console. Each page's list is deduplicated here, the first
of equal scripts kept, before the page is written.
"""
from __future__ import annotations


def _key(script) -> tuple:
    return (getattr(script, "filename", script) or "", getattr(script, "priority", None),
            tuple(sorted(getattr(script, "attributes", {}).items())))


def load_once(app, pagename, templatename, context, doctree) -> None:
    """``html-page-context``: drop repeated scripts from the page's ``script_files``."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        if _key(script) not in seen:
            seen.add(_key(script))
            unique.append(script)
    scripts[:] = unique          # the builder restores its own list after each page


def default_mode(app, config) -> None:
    """``config-inited``: the theme's colour mode, unless the book sets one."""
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def setup(app):
    app.connect("config-inited", default_mode)
    app.connect("html-page-context", load_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
