"""The built wheel: it installs where no build can run, and both extensions load."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).parent.parent


def run(*args: str | Path, **kwargs: object) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs
    )  # type: ignore[call-overload]
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout + done.stderr)


def test_the_wheel_installs_without_node_and_both_extensions_are_ok(
    tmp_path: Path,
) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", dist, ROOT)
    (wheel,) = dist.glob("dask_observe-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # The new environment borrows this one's dependencies (not its dask_observe: a
    # path in a .pth file adds no editable-install hooks), and its PATH has no node.
    purelib = sysconfig.get_paths()["purelib"]
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    Path(run(python, "-c", code).strip(), "borrowed.pth").write_text(purelib + "\n")
    env = {**os.environ, "PATH": str(venv / "bin")}
    here = {
        "env": env,
        "cwd": tmp_path,
    }  # not the source tree, so imports come from venv
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, **here)

    where = run(
        python, "-c", "import dask_observe; print(dask_observe.__file__)", **here
    )
    assert where.startswith(str(venv))
    # `jupyter X` looks for a `jupyter-X` executable on PATH; call the apps directly.
    lab_app = "from jupyterlab.labextensions import main; main()"
    server_app = "from jupyter_server.extension.serverextension import main; main()"
    labextensions = run(python, "-c", lab_app, "list", **here)
    assert "dask-observe v" in labextensions
    line = next(x for x in labextensions.splitlines() if "dask-observe v" in x)
    assert "enabled" in line and "OK" in line
    assert str(venv / "share" / "jupyter" / "labextensions") in labextensions
    # The panel's settings schema ships with it (Settings Editor, "Dask Observe").
    schema = venv / "share/jupyter/labextensions/dask-observe/schemas/dask-observe"
    assert '"logBufferSize"' in (schema / "plugin.json").read_text()
    server = run(python, "-c", server_app, "list", **here)
    assert "dask_observe enabled" in server.replace("\x1b[32m", "").replace(
        "\x1b[0m", ""
    )
    assert "dask_observe 0" in server and "OK" in server


def test_the_lowest_python_claimed_is_the_one_checked_and_set_up() -> None:
    # requires-python, mypy, ruff and the setup script all name one lowest
    # Python (3.10 was claimed once, never run, and the capture failed there at
    # import); the suite runs on it or on a newer one.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lowest = project["project"]["requires-python"].removeprefix(">=")
    assert project["tool"]["mypy"]["python_version"] == lowest
    assert project["tool"]["ruff"]["target-version"] == "py" + lowest.replace(".", "")
    major, minor = map(int, lowest.split("."))
    assert sys.version_info[:2] >= (major, minor)
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert f"sys.version_info < ({major}, {minor})" in setup
