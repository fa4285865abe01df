"""The package's layers point one way: each module imports only from its own
layer or the ones below, whether at the top of the file or inside a function.

    capture  <  units, plaintext, config, redact, analysis.noise  <  store
             <  analysis.figures, analysis.series  <  diagnose, report, analysis, export
             <  api (the public Run and Store), archive  <  recording
             <  notebook, server, cli, demo

(An import-linter contract, read from the source with ``ast``: no dependency.)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "dask_observe"

#: Lowest first. A module is in the layer of its longest matching name.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dask_observe.capture",),
    ("dask_observe._version", "dask_observe.units", "dask_observe.plaintext",
     "dask_observe.config", "dask_observe.analysis.noise", "dask_observe.redact"),
    ("dask_observe.store",),
    ("dask_observe.analysis.figures", "dask_observe.analysis.series"),
    ("dask_observe.diagnose", "dask_observe.report", "dask_observe.analysis",
     "dask_observe.export"),
    # The public Run and Store, and the archive (whose runs are Runs, read
    # into a Store; a Run publishes itself).
    ("dask_observe.api", "dask_observe.archive"),
    ("dask_observe.recording",),
    # The package's own entry points (the API, %load_ext, the server
    # extension) sit on top, with what they load.
    ("dask_observe", "dask_observe.notebook", "dask_observe.server",
     "dask_observe.cli", "dask_observe.commands", "dask_observe.demo"),
)  # fmt: skip

#: What the capture may import besides the standard library and itself: it
#: travels to clusters that have nothing of ours.
CAPTURE_MAY_IMPORT = {"distributed", "dask", "tornado", "psutil"}


def layer(module: str) -> int:
    best, found = -1, -1
    for level, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), level
    if found < 0:
        raise KeyError(f"{module} is in no layer: add it to LAYERS")
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").exists() or (
        PACKAGE / relative / "__init__.py"
    ).exists()


def imported(module: str, source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source``, relative ones resolved;
    ``from package import name`` names the submodule where ``name`` is one."""
    is_package = (PACKAGE / Path(*module.split(".")[1:]) / "__init__.py").exists()
    package = module if is_package else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append(
                    (node.lineno, candidate if _is_module(candidate) else base)
                )
    return found


def violations(sources: dict[str, str]) -> list[str]:
    """Each import that points up a layer, or out of what the capture may use."""
    wrong = []
    for module, source in sources.items():
        own = layer(module)
        for line, name in imported(module, source):
            top = name.split(".")[0]
            if top == "dask_observe":
                if layer(name) > own:
                    wrong.append(f"{module}:{line} imports {name} (a higher layer)")
            elif own == 0 and top not in CAPTURE_MAY_IMPORT | sys.stdlib_module_names:
                wrong.append(f"{module}:{line} imports {name} (not on a cluster)")
    return wrong


def package_sources() -> dict[str, str]:
    sources = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.endswith("__init__"):
            name = name.removesuffix(".__init__")
        sources[name] = path.read_text()
    return sources


def test_every_import_points_down_the_layers() -> None:
    assert violations(package_sources()) == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("dask_observe.store.rundata", "from dask_observe.report import Report"),
        ("dask_observe.store.rundata", "def f():\n    from dask_observe import api\n"),
        ("dask_observe.analysis.figures", "from ..diagnose import flag_list"),
        ("dask_observe.analysis.noise", "from dask_observe.store import BaseStore"),
        ("dask_observe.api", "from dask_observe.recording import block"),
        ("dask_observe.diagnose.base", "from dask_observe.api import Run"),
        ("dask_observe.capture.worker", "import pandas"),
        ("dask_observe.capture.worker", "from dask_observe.store import BaseStore"),
    ],
)
def test_a_reversed_import_is_caught(module: str, source: str) -> None:
    assert len(violations({module: source})) == 1


def test_every_module_is_in_a_layer() -> None:
    for module in package_sources():
        layer(module)


def test_no_test_module_imports_from_another() -> None:
    # Shared helpers live in conftest.py and the suite's helper modules
    # (tasks.py, planted.py, otlp.py, ...). A test module imported by another
    # was imported by the workers too, to run a task function defined in it:
    # pandas and dask.dataframe on a worker's event loop, a stall that the
    # flags then rightly blamed on the run.
    found = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.name}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[-1].startswith("test_")
            ]
        # And the code of the notebooks and scripts the tests write.
        if path != Path(__file__):
            found += [
                f"{path.name}: {line.strip()}"
                for line in source.splitlines()
                if "tests.test_" in line
            ]
    assert found == []
