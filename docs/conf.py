"""Sphinx configuration: Markdown pages (MyST) and the API reference from the
docstrings (autodoc). Built by tests/test_docs.py with warnings as errors:
``python -m sphinx -W -b html docs docs/_build/html``."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import kproto  # noqa: E402

project = "kproto / kio"
author = "the kproto-kio authors"
release = version = kproto.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
root_doc = "index"

myst_heading_anchors = 4            # [text](page.md#a-heading) links resolve
html_theme = "alabaster"
html_title = "kproto / kio"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
# Docstrings cross-reference classes of other modules and of the standard
# library by name; a name Sphinx cannot resolve is shown as code, not a warning.
nitpicky = False
