"""The project's own promises about itself: a thin client, and CI running the README's test command."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..paths import ROOT


def _client_mmd_imports() -> list[tuple[str, int, str]]:
    """(file, line, what) of every import of the daemon's package in clients/mm, wherever it stands."""
    found = []
    for path in sorted((ROOT / "clients" / "mm").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found += [(path.name, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found += [(path.name, node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(name, line, what) for name, line, what in found if what.split(".")[0] == "mmd"]


def _client_may_import(what: str) -> bool:
    """mmd itself (for mmd.__version__), mmd.paths, and mmd.rpc with anything in it."""
    allowed = ("mmd", "mmd.__version__", "mmd.paths", "mmd.rpc")
    return what in allowed or what.startswith(("mmd.rpc.", "mmd.paths."))


def test_client_imports_no_daemon_internals():
    imports = _client_mmd_imports()
    assert imports, "the client imports mmd.rpc at least"
    bad = [
        f"clients/mm/{name}:{line} imports {what}"
        for name, line, what in imports
        if not _client_may_import(what)
    ]
    assert not bad, bad
    code = (
        "import sys, mm.cli, mm.eval, mm.connection, mm.render, mm.service\n"
        "heavy = ('trio', 'httpx', 'anyio', 'h11', 'psutil', 'yaml', 'sqlite3')\n"
        "bad = sorted(m for m, mod in sys.modules.items() if mod is not None and (m.split('.')[0] in heavy\n"
        "             or (m.startswith('mmd.') and not m.startswith(('mmd.rpc', 'mmd.paths')))))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert block, "the README starts with a sh block"
    return [line for line in block[1].splitlines() if line.strip()]


def test_readme_starts_with_exactly_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("\n## "), "the commands come before any section"
    commands = readme_commands()
    assert len(commands) == 2
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    assert readme_commands()[1] in (ROOT / ".ci" / "run").read_text()


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def test_no_build_output_is_tracked():
    tracked = _git("ls-files").splitlines()
    assert not [f for f in tracked if f.startswith(("build/", "dist/")) or ".egg-info/" in f]


def _run_installed(target: Path) -> str:
    """`mm --version` from an install in *target* (its dependencies from this interpreter)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import mm.cli; print(mm.cli.__file__)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert where.stdout.startswith(str(target)), where
    out = subprocess.run([str(target / "bin" / "mm"), "--version"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_an_export_of_head_installs_the_real_mm_from_a_folder_an_sdist_and_a_wheel(tmp_path):
    """`git archive` gives every file one timestamp: stale build output would win. Each way must give mm."""
    from mmd import __version__

    export = tmp_path / "export"
    export.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(export)], input=archive, check=True)
    expected = f"mm, version {__version__}"
    # 1. pip install of the exported folder
    _pip("install", "--no-deps", "--target", str(tmp_path / "t1"), str(export))
    assert _run_installed(tmp_path / "t1") == expected
    # 2. an sdist of the export, and 3. a wheel built from that sdist
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta as b; b.build_sdist({str(dist)!r})"],
        cwd=export,
        check=True,
        capture_output=True,
    )
    [sdist] = dist.glob("*.tar.gz")
    _pip("wheel", "--no-deps", "-w", str(dist), str(sdist))
    [wheel] = dist.glob("*.whl")
    _pip("install", "--no-deps", "--target", str(tmp_path / "t2"), str(wheel))
    assert _run_installed(tmp_path / "t2") == expected
    # The wheel holds the sources and nothing else of the tree.
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "mm/cli.py" in names and "mmd/local/install.py" in names and "mmd/local/unity.cmake" in names
    assert not [n for n in names if n.startswith(("tests/", "build/", "bench/"))]
