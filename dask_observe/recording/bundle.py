"""The capture package as it travels: its sources, compressed, under a module
name of its own (``dask_observe_capture_<hash of the source>``), and the
importer that runs them in a cluster's process. Shipped by value with the
plugins (see :mod:`.plugins`): what runs on the cluster here uses the standard
library only.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
import types
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dask_observe import capture


@dataclass(frozen=True)
class Bundle:
    """The capture package as shipped: its module name and compressed sources."""

    package: str
    #: Module name inside the package ("__init__" for the package) -> zlib'd source.
    files: dict[str, bytes]


@cache
def local_bundle() -> Bundle:
    """The capture package of this installation, read once per process."""
    folder = Path(capture.__file__).parent
    sources = {p.stem: p.read_bytes() for p in sorted(folder.glob("*.py"))}
    digest = hashlib.sha256()
    for name, source in sources.items():
        digest.update(name.encode() + b"\0" + source + b"\0")
    return Bundle(
        package=f"dask_observe_capture_{digest.hexdigest()[:12]}",
        files={name: zlib.compress(source, 9) for name, source in sources.items()},
    )


# -- on the cluster ---------------------------------------------------------------
class _BundleImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules of one bundle from their source text (as zipimport
    does from an archive), so that the package's relative imports, its module
    state and tracebacks (through linecache) work as if it were installed; or,
    where an installed dask-observe holds the very same source, from the
    bytecode Python cached for it."""

    def __init__(self, package: str, files: dict[str, bytes]) -> None:
        self.package = package
        self.files = files
        #: Where an installed dask-observe's capture is, looked up once.
        self.installed = _installed_capture()

    def _relative(self, fullname: str) -> str | None:
        if fullname == self.package:
            return "__init__"
        head, _, name = fullname.rpartition(".")
        return name if head == self.package and name in self.files else None

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = self._relative(fullname)
        if name is None:
            return None
        return importlib.util.spec_from_loader(
            fullname,
            self,
            origin=f"<{self.package}>/{name}.py",
            is_package=name == "__init__",
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        name = self._relative(module.__name__)
        assert name is not None
        source = zlib.decompress(self.files[name])
        code = _installed_code(self.installed, name, source)
        if code is None:
            text = source.decode()
            filename = f"<{self.package}>/{name}.py"
            # mtime None: linecache.checkcache never drops it.
            lines = text.splitlines(True)
            linecache.cache[filename] = (len(text), None, lines, filename)
            code = compile(text, filename, "exec")
        exec(code, module.__dict__)


def _installed_capture() -> list[Path]:
    """The capture folders of an installed dask-observe (none: not installed),
    found without importing it."""
    try:
        spec = importlib.util.find_spec("dask_observe")
    except (ImportError, ValueError):
        return []
    folders = spec.submodule_search_locations if spec is not None else None
    return [Path(folder, "capture") for folder in folders or ()]


def _installed_code(
    folders: list[Path], name: str, source: bytes
) -> types.CodeType | None:
    """The bytecode Python cached for this module of an installed dask-observe
    (in ``folders``), when that module's source is byte for byte the source
    shipped (a LocalCluster's processes, a cluster built from the client's
    environment): compiling the bundle took 10-17 ms in each process a first
    run reaches, the kernel's own included. Else None: the shipped source is
    compiled."""
    for folder in folders:
        path = folder / f"{name}.py"
        try:
            if path.is_file() and path.read_bytes() == source:
                loader = importlib.machinery.SourceFileLoader(
                    f"dask_observe.capture.{name}", str(path)
                )
                return loader.get_code(loader.name)
        except (ImportError, OSError, SyntaxError):
            pass  # an installation that cannot say: the source it is
    return None


def import_bundle(package: str, files: dict[str, bytes]) -> types.ModuleType:
    """The bundle's package, imported once per process (later calls reuse it)."""
    if package in sys.modules:
        return sys.modules[package]
    if not any(getattr(f, "package", None) == package for f in sys.meta_path):
        sys.meta_path.append(_BundleImporter(package, files))
    return importlib.import_module(package)
