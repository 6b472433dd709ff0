"""A Sphinx extension of the book's site: every page loads each of its scripts once.

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


def setup(app):
    app.connect("html-page-context", load_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
