"""Sphinx configuration of dask-observe's documentation (MyST Markdown).

Build: ``.venv/bin/sphinx-build -W -b html docs docs/_build/html`` after the
browser tests, whose screenshots (``ui-tests/artifacts``) the pages show.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))

project = "dask-observe"
author = "the dask-observe developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "observe_docs",
]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "pydata_sphinx_theme"
html_title = "dask-observe"
html_static_path = ["_static"]
html_theme_options = {"navigation_with_keys": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_numpy_docstring = True
