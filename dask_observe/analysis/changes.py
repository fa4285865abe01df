"""What changed between the environments of two runs (``Run.environment()``),
and what differs between the processes of one: the changes a comparison and
a history list, the versions the version-mismatch flag names."""

from __future__ import annotations

import difflib
from typing import Any


def differences(
    a: dict[str, Any], b: dict[str, Any]
) -> list[tuple[str, str, Any, Any]]:
    """What changed from environment ``a`` to ``b``: (area, what, in a, in b)
    for packages (by process), config keys, the cluster's shape, and the code.
    Empty where either run has no environment recorded."""
    if not a or not b:
        return []
    found: list[tuple[str, str, Any, Any]] = []
    for who in sorted(set(a.get("packages", {})) | set(b.get("packages", {}))):
        pa = a.get("packages", {}).get(who, {})
        pb = b.get("packages", {}).get(who, {})
        for name in sorted(set(pa) | set(pb)):
            if pa.get(name) != pb.get(name):
                found.append(
                    ("packages", f"{name} ({who})", pa.get(name), pb.get(name))
                )
    for area in ("config", "cluster"):
        va, vb = a.get(area, {}), b.get(area, {})
        for key in sorted(set(va) | set(vb)):
            if va.get(key) != vb.get(key):
                found.append((area, key, va.get(key), vb.get(key)))
    ca, cb = a.get("code", {}), b.get("code", {})
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key) != cb.get(key):  # a cell as its source: code_diff shows it
            found.append(("code", key, ca.get(key), cb.get(key)))
    return found


#: Lines of a code diff shown at most, and lines of context around a change.
DIFF_LINES = 40
DIFF_CONTEXT = 2


def code_diff(a: object, b: object) -> list[str]:
    """A unified diff of two sources (a recorded cell), a few lines of
    context around each change, at most DIFF_LINES lines (then a count)."""
    lines = list(
        difflib.unified_diff(
            str(a or "").splitlines(),
            str(b or "").splitlines(),
            "a",
            "b",
            n=DIFF_CONTEXT,
            lineterm="",
        )
    )[2:]  # the ---/+++ header says nothing here
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... {len(lines) - DIFF_LINES} more lines"]
    return lines


def change_text(area: str, what: str, a: object, b: object) -> str:
    """One change on one line: ``config x: 1 -> 2``; a cell's as the count of
    lines its diff adds and removes."""
    if area == "code" and what == "cell":
        diff = code_diff(a, b)
        added = sum(1 for line in diff if line.startswith("+"))
        removed = sum(1 for line in diff if line.startswith("-"))
        return f"code cell: +{added} -{removed} lines"
    return f"{area} {what}: {a} -> {b}"


def mismatches(environment: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Packages whose versions differ between the run's processes: (package,
    {process: version}), for the packages every process must agree on."""
    packages = environment.get("packages", {})
    found: list[tuple[str, dict[str, Any]]] = []
    for name in ("python", "dask", "distributed", "cloudpickle", "msgpack",
                 "numpy", "pandas", "pyarrow", "toolz", "lz4"):  # fmt: skip
        versions = {who: p[name] for who, p in packages.items() if p.get(name)}
        if name == "python":  # patch releases agree; minor ones may not
            minors = {who: ".".join(v.split(".")[:2]) for who, v in versions.items()}
            if len(set(minors.values())) > 1:
                found.append((name, versions))
        elif len(set(versions.values())) > 1:
            found.append((name, versions))
    return found
