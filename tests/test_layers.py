"""The package's layers point one way: each module imports only from its own
layer or the ones below, whether at the top of the file or inside a function.

    capture  <  units, plaintext, config, redact, analysis.noise  <  store
             <  analysis.figures, .series, .few  <  diagnose, report, analysis, export
             <  api (the public Run and Store), archive  <  recording
             <  notebook, server, cli, demo

(An import-linter contract, read from the source with ``ast``: no dependency.)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).parent.parent / "dask_observe"


def parse(source: str) -> ast.Module:
    """``ast.parse``, once more after CPython 3.11's spurious "AST constructor
    recursion depth mismatch": the AST's depth counter is shared by the
    process's threads (python/cpython#106905), and 3.11 formats each
    traceback with ``ast.parse`` (its carets), as a thread of an earlier
    test's cluster may be doing meanwhile (once in the suite)."""
    try:
        return ast.parse(source)
    except SystemError as e:
        if "recursion depth mismatch" not in str(e):
            raise
        return ast.parse(source)


#: Lowest first. A module is in the layer of its longest matching name.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dask_observe.capture",),
    ("dask_observe._version", "dask_observe.units", "dask_observe.plaintext",
     "dask_observe.config", "dask_observe.analysis.noise", "dask_observe.redact"),
    ("dask_observe.store",),
    ("dask_observe.analysis.figures", "dask_observe.analysis.series",
     "dask_observe.analysis.few"),
    # What is made of a run's data: figures, comparisons and histories; the
    # flags judged from them; exports of both; reports that show them all.
    ("dask_observe.analysis",),
    ("dask_observe.diagnose",),
    ("dask_observe.export",),
    ("dask_observe.report",),
    # The team's archive: a run published (its rows, flags and manifest).
    ("dask_observe.archive",),
    # The public Run and Store (a Run publishes itself), and an archive read
    # as a Store (its runs are Runs).
    ("dask_observe.api",),
    ("dask_observe.recording",),
    # The package's own entry points (the API, %load_ext, the server
    # extension) sit on top, with what they load.
    ("dask_observe", "dask_observe.notebook", "dask_observe.server",
     "dask_observe.cli", "dask_observe.subcommands", "dask_observe.demo"),
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
    for node in ast.walk(parse(source)):
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
        for node in ast.walk(parse(source)):
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


def _without_type_checking(source: str) -> ast.Module:
    """``source`` without its ``if TYPE_CHECKING:`` blocks: what it imports
    when it runs (a name for annotations only is no dependency)."""

    class Strip(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> Any:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                return node.orelse or None
            return self.generic_visit(node)

    stripped: ast.Module = Strip().visit(parse(source))
    return stripped


def import_graph(
    sources: dict[str, str], depth: int | None = None
) -> dict[str, set[str]]:
    """Who imports whom at run time, by module (or by package: the first
    ``depth`` parts of each name), this package's modules only."""

    def unit(name: str) -> str:
        return name if depth is None else ".".join(name.split(".")[:depth])

    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        code = ast.unparse(_without_type_checking(source))
        for _, name in imported(module, code):
            if name.split(".")[0] == "dask_observe" and unit(name) != unit(module):
                graph.setdefault(unit(module), set()).add(unit(name))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


#: The import cycles left (issue 69): each to be cut, never one added.
KNOWN_MODULE_CYCLES: list[list[str]] = []
KNOWN_PACKAGE_CYCLES: list[list[str]] = []


def test_no_import_cycle_but_those_known() -> None:
    # Cycles the layer rule allows (modules of one layer): a module imported
    # inside a function to dodge one is still a dependency both ways. The
    # lists shrink as cycles are cut; a new one fails here.
    sources = package_sources()
    assert cycles(import_graph(sources)) == KNOWN_MODULE_CYCLES
    assert cycles(import_graph(sources, depth=2)) == KNOWN_PACKAGE_CYCLES


def test_the_layers_are_stated_once_for_readers_as_here() -> None:
    # CONTRIBUTING.md lists the layers; this table is what holds them.
    def short(name: str) -> str:
        return name if name == "dask_observe" else name.removeprefix("dask_observe.")

    line = " < ".join(", ".join(map(short, names)) for names in LAYERS)
    contributing = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    assert f"```\n{line}\n```" in contributing, line


def test_a_cycle_is_found_through_a_function_s_import_not_an_annotation_s() -> None:
    sources = {
        "dask_observe.recording.link": (
            "def f():\n    from dask_observe.recording import plugins\n"
        ),
        "dask_observe.recording.plugins": "from dask_observe.recording import link\n",
        "dask_observe.store.runs": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from dask_observe.store.store import BaseStore\n"
        ),
        "dask_observe.store.store": "from dask_observe.store import runs\n",
    }
    assert cycles(import_graph(sources)) == [
        ["dask_observe.recording.link", "dask_observe.recording.plugins"]
    ]


#: The third-party modules that a module of ours may import inside a function,
#: and why: each takes tens to hundreds of milliseconds to import, and some
#: path that imports the module needs none of it (``import dask_observe`` in
#: the Jupyter server and in scripts, ``dask-observe runs``, the capture on a
#: cluster's processes) or may lack it.
DEFERRED: dict[str, str] = {
    "pandas": "frames: the store's listings and the CLI read rows without it",
    "numpy": "figures and charts; the listings and the server need none",
    "pyarrow": "Parquet export only",
    "dask": "its config and utils: the server extension must not need dask",
    "distributed": "recording only; the server and the CLI's reading need none",
    "tornado": "distributed's loop, on the recording side",
    "psutil": "host load on a cluster's processes and the demo",
    "cloudpickle": "shipping the capture, at a cluster's first recorded block",
    "IPython": "the notebook's display, absent from scripts and the CLI",
    "ipywidgets": "the live display under a cell",
    "opentelemetry": "OTLP export only, an optional extra",
    "requests": "OTLP export only",
    "fsspec": "the team archive only",
    "re2": "optional: patterns use it where installed",
    "yaml": "reading the config file, at the first value asked",
    "jupyter_server.serverapp": "the server's application, to start one",
}

#: Our own modules imported inside a function for a reason other than a
#: deferred module above: (importer, imported): why.
DEFERRED_OWN: dict[tuple[str, str], str] = {
    ("dask_observe.config", "dask_observe._version"): (
        "written at install: a source tree that was never built lacks it"
    ),
}


def _deferred_root(name: str) -> str | None:
    for root in DEFERRED:
        if name == root or name.startswith(root + "."):
            return root
    return None


def _imports_by_place(module: str, source: str) -> tuple[list[str], list[ast.stmt]]:
    """What ``module`` imports at its top (run-time imports: not under
    ``TYPE_CHECKING``, in a ``try`` or ``if`` included), and the import
    statements inside its functions."""
    top: list[ast.stmt] = []
    inside: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                (inside if in_function else top).append(child)
            else:
                function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                visit(child, in_function or function)

    visit(_without_type_checking(source), False)
    names = imported(module, ast.unparse(ast.Module(body=top, type_ignores=[])))
    return [name for _, name in names], inside


def lazy_imports_without_reason(sources: dict[str, str]) -> list[str]:
    """Each import inside a function that defers nothing heavy: neither a
    module of :data:`DEFERRED` nor one of ours that imports one (at its top,
    or through what it imports so) which the importer does not already."""
    places = {module: _imports_by_place(module, s) for module, s in sources.items()}

    def own(name: str) -> str:  # the module of ours that ``name`` is or is in
        while name not in sources and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    def with_packages(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

    def heavy(module: str) -> set[str]:
        """The deferred modules that importing ``module`` imports."""
        seen: set[str] = set()
        found: set[str] = set()
        todo = with_packages(module)
        while todo:
            current = todo.pop()
            if current in seen or current not in places:
                continue
            seen.add(current)
            for name in places[current][0]:
                if name.split(".")[0] == "dask_observe":
                    todo += with_packages(own(name))
                elif root := _deferred_root(name):
                    found.add(root)
        return found

    wrong = []
    for module, (_, inside) in places.items():
        for node in inside:
            code = ast.unparse(ast.Module(body=[node], type_ignores=[]))
            for _, name in imported(module, code):
                if name.split(".")[0] != "dask_observe":
                    deferred = _deferred_root(name) is not None
                else:
                    deferred = (module, name) in DEFERRED_OWN or bool(
                        heavy(own(name)) - heavy(module)
                    )
                if not deferred:
                    wrong.append(f"{module}:{node.lineno} imports {name} in a function")
    return wrong


def test_an_import_inside_a_function_defers_a_heavy_module() -> None:
    # Anything else goes at the top, where a reader looks for what a module
    # needs (no cycle calls for a function's import: see above).
    assert lazy_imports_without_reason(package_sources()) == []


_HEAVY_REPORT = "import numpy\n\ndef page():\n    return numpy\n"


@pytest.mark.parametrize(
    ("sources", "caught"),
    [
        ({"dask_observe.store.rundata": "def f():\n    import json\n"}, 1),
        ({"dask_observe.store.rundata": "def f():\n    import pandas as pd\n"}, 0),
        (
            {
                "dask_observe.report.style": _HEAVY_REPORT,
                "dask_observe.server.pages": (
                    "def f():\n    from dask_observe.report.style import page\n"
                ),
            },
            0,
        ),
        (
            {
                "dask_observe.report.style": _HEAVY_REPORT,
                "dask_observe.server.pages": (
                    "import numpy\n"
                    "def f():\n    from dask_observe.report.style import page\n"
                ),
            },
            1,
        ),
        (
            {
                "dask_observe.units": "X = 1\n",
                "dask_observe.store.rundata": (
                    "try:\n    import json\nexcept ImportError:\n    pass\n"
                    "def f():\n    from dask_observe.units import X\n"
                ),
            },
            1,
        ),
    ],
)
def test_a_function_s_import_that_defers_nothing_is_caught(
    sources: dict[str, str], caught: int
) -> None:
    assert len(lazy_imports_without_reason(sources)) == caught
