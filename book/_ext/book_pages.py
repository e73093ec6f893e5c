"""The book's own Sphinx extension (book/_config.yml, ``sphinx.local_extensions``): every page loads each script once.

sphinx-thebe and sphinx-togglebutton add inline scripts (``const THEBE_JS_URL = ...``) after the HTML builder has
copied the extensions' registry; Sphinx 7 then lists them twice (once with the file name ``None``, once with ``""``),
and the browser refuses the second ``const`` declaration on every page ("Identifier 'THEBE_JS_URL' has already been
declared"). Keeping the first copy of each script is what the extensions meant.
"""
from __future__ import annotations


def _key(script) -> tuple:
    filename = getattr(script, "filename", script)
    attributes = getattr(script, "attributes", {}) or {}
    return (str(filename or ""), getattr(script, "priority", 500), tuple(sorted(attributes.items())))


def each_script_once(app, pagename, templatename, context, doctree) -> None:
    seen, kept = set(), []
    for script in context.get("script_files", []):
        key = _key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", each_script_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
