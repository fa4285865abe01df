"""Pages generated from the code, so that they never go stale:

- ``cli-reference``: every subcommand's help, from ``dask_observe.cli``'s parser;
- ``observe-config [SECTION]``: the shipped ``observe.yaml`` (or one section of
  it), the configuration with its comments;
- the screenshots the pages show, copied from what the browser tests wrote to
  ``ui-tests/artifacts`` (a build before those tests ran says so).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "ui-tests" / "artifacts"


def _literal(text: str, language: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = language
    return block


class CliReference(SphinxDirective):
    """``dask-observe --help`` and each subcommand's help, in order."""

    def run(self) -> list[nodes.Node]:
        from dask_observe.cli import build_parser

        parser = build_parser()
        found: list[nodes.Node] = [_literal(parser.format_help(), "text")]
        for action in parser._subparsers._group_actions if parser._subparsers else ():
            if not isinstance(action, argparse._SubParsersAction):
                continue
            for name, sub in action.choices.items():
                section = nodes.section(ids=[f"cli-{name}"])
                section += nodes.title(text=f"dask-observe {name}")
                section += _literal(sub.format_help(), "text")
                found.append(section)
        return found


class ObserveConfig(SphinxDirective):
    """The shipped configuration, or the block of one top-level key in it."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from dask_observe.config import DEFAULTS_FILE

        self.env.note_dependency(str(DEFAULTS_FILE))
        text = DEFAULTS_FILE.read_text()
        if self.arguments:
            text = _section(text, self.arguments[0])
        return [_literal(text, "yaml")]


def _section(text: str, key: str) -> str:
    """The lines of ``observe.<key>`` (two spaces in) and what it nests."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.rstrip() == f"  {key}:"), None
    )
    if start is None:
        raise ExtensionError(f"observe.yaml has no observe.{key}")
    end = start + 1
    while end < len(lines) and (
        not lines[end].strip() or lines[end].startswith("    ")
    ):
        end += 1
    return "\n".join(lines[start:end]).rstrip() + "\n"


def copy_screenshots(app: Sphinx) -> None:
    wanted = sorted(ARTIFACTS.glob("*.png")) if ARTIFACTS.is_dir() else []
    if not wanted:
        raise ExtensionError(
            f"no screenshots in {ARTIFACTS}: the browser tests take them "
            "(.venv/bin/python -m pytest ui-tests), then build the docs"
        )
    target = Path(app.srcdir) / "_static" / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    for png in wanted:
        shutil.copyfile(png, target / png.name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-reference", CliReference)
    app.add_directive("observe-config", ObserveConfig)
    app.connect("builder-inited", copy_screenshots)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
