"""``mm eval FIXTURE``: how reliably a model gets your tools called, measured the seeds' way.

A fixture folder holds an ``eval.yaml`` (modes, cases, runs), one agent file
per mode, and the actions the tools run. Every case is asked in each of its
languages, N times per mode and model, each time as a fresh session through
the daemon, exactly as ``mm -p`` would. A run succeeds when the actions' log
shows the expected argv and nothing else: judged from the file the action
wrote, never from the model's answer. docs/eval.md describes the format.

The fixture is copied into a scratch folder first, so the runs write nothing
into it and two evals never share a log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmd.rpc import ProtocolError, RPCError, decode_result
from mmd.rpc.results import EvalFixture

from .connection import Client, DaemonError

# After a run's timeout the turn is cancelled; it must end within this many seconds.
CANCEL_GRACE = 30.0


@dataclass
class Fixture:
    root: Path  # the folder holding eval.yaml
    file: Path
    spec: EvalFixture


class FixtureError(Exception):
    """The fixture cannot be used; the message names the file, line and field."""


def load_fixture(client: Client, path: str | os.PathLike[str]) -> Fixture:
    """Have the daemon read and check a fixture: a folder with eval.yaml, or the yaml file itself.

    Every mode's agent file is loaded too, so a broken variant is reported
    before the first run, with its own file and line.

    Errors: FixtureError; DaemonError when the connection breaks or the answer is malformed.
    """
    try:
        spec = decode_result(client.call("eval.load", {"path": str(Path(path).absolute())}), EvalFixture)
    except RPCError as exc:
        raise FixtureError(exc.message) from None
    except ProtocolError as exc:
        raise DaemonError(str(exc)) from None
    return Fixture(root=Path(spec.root), file=Path(spec.file), spec=spec)


@dataclass
class Run:
    """One prompt of one case, in one language, mode and model."""

    model: str
    mode: str
    case: str
    lang: str
    run: int  # 1-based
    prompt: str
    expected: list[str]


@dataclass
class RunResult:
    model: str
    mode: str
    case: str
    lang: str
    run: int
    ok: bool
    seconds: float
    status: str  # how the turn ended: ok, loop, denied, error, cancelled, timeout
    argv: list[list[str]]  # every argv the actions logged, in order
    expected: list[str]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    recovered: int = 0  # tool calls the harness recovered from the model's text
    skill: str | None = None  # the skill chosen for the turn (skill_chosen), "none"; None: no choice made
    text: str = ""
    error: str | None = None
    session_id: str = ""
    steps: int = 0  # model steps (assistant events)
    # Summed over the steps whose server reported timings (llama-server does); None if none did.
    prompt_tokens: int | None = None  # the prompts, cached tokens included
    cached_tokens: int | None = None  # reused from the server's prompt cache, not processed again
    prompt_seconds: float | None = None  # processing the prompts' uncached tokens
    gen_tokens: int | None = None
    gen_seconds: float | None = None  # generating the answers

    def add_step(self, timings: Any) -> None:
        """Count one model step and add what its server reported about its time, if anything."""
        self.steps += 1
        if not isinstance(timings, dict):
            return

        def add(total: float | None, key: str, scale: float = 1.0) -> float:
            value = timings.get(key)
            return (total or 0) + (value * scale if isinstance(value, int | float) else 0)

        self.prompt_tokens = int(add(self.prompt_tokens, "prompt_tokens"))
        self.cached_tokens = int(add(self.cached_tokens, "cached_tokens"))
        self.gen_tokens = int(add(self.gen_tokens, "gen_tokens"))
        self.prompt_seconds = round(add(self.prompt_seconds, "prompt_ms", 0.001), 3)
        self.gen_seconds = round(add(self.gen_seconds, "gen_ms", 0.001), 3)


def judge(argv: list[list[str]], expected: list[str]) -> bool:
    """Success: the action ran, and every time with exactly the expected argv."""
    return bool(argv) and all(entry == expected for entry in argv)


def plan(
    fixture: Fixture,
    models: list[str],
    *,
    runs: int | None = None,
    modes: list[str] | None = None,
    cases: list[str] | None = None,
    langs: list[str] | None = None,
) -> list[Run]:
    """Every run, in order: model, mode, case, language, run number.

    Errors: FixtureError for a mode, case or language the fixture does not have.
    """
    spec = fixture.spec
    _check_choice("mode", modes, spec.modes)
    _check_choice("case", cases, [c.name for c in spec.cases])
    _check_choice("language", langs, {lang for c in spec.cases for lang in c.prompts})
    out = []
    for model in models:
        for mode in spec.modes:
            if modes and mode not in modes:
                continue
            for case in spec.cases:
                if cases and case.name not in cases:
                    continue
                for lang, prompt in case.prompts.items():
                    if langs and lang not in langs:
                        continue
                    for n in range(1, (runs or spec.runs) + 1):
                        out.append(Run(model, mode, case.name, lang, n, prompt, list(case.expect)))
    return out


def _check_choice(what: str, chosen: list[str] | None, known: Any) -> None:
    for name in chosen or ():
        if name not in known:
            raise FixtureError(f'the fixture has no {what} "{name}"; it has: {", ".join(sorted(known))}')


class Workspace:
    """A scratch copy of the fixture; every session of the eval runs in it."""

    def __init__(self, fixture: Fixture, keep: bool = False) -> None:
        self.fixture = fixture
        self.keep = keep
        self.path = Path(tempfile.mkdtemp(prefix="mm-eval-"))
        shutil.copytree(
            fixture.root,
            self.path,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", fixture.spec.log),
        )
        self.log = self.path / fixture.spec.log

    def agent(self, mode: str) -> Path:
        return self.path / self.fixture.spec.modes[mode]

    def read_log(self) -> list[list[str]]:
        try:
            lines = self.log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                entry = json.loads(line)
                argv = entry["argv"] if isinstance(entry, dict) else entry
            except (ValueError, KeyError, RecursionError):
                # RecursionError: a line nested ~1000 deep. json's C parser checks the recursion
                # limit at each level, so it fails cleanly, in this client process only.
                argv = ["<unreadable log line>", line]
            out.append([str(a) for a in argv])
        return out

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


class EvalError(Exception):
    """The eval cannot go on (the daemon went away, a model cannot start); says what to do."""


class Runner:
    """Runs prompts through the daemon, one fresh session each, and judges them from the log."""

    def __init__(self, client: Client, workspace: Workspace, timeout: float) -> None:
        self.client = client
        self.ws = workspace
        self.timeout = timeout
        self._warnings: list[str] = []  # those of the last run

    def warm_up(self, model: str, mode: str, prompt: str) -> list[str]:
        """One untimed run: loads the model and starts the mode's MCP servers.

        Returns the warnings the turn raised (an MCP server left out, a timeout).
        Errors: EvalError when the turn ends with an error (no such model, a server
        that cannot start): every run would fail the same way.
        """
        result = self.run(Run(model, mode, "(warm-up)", "", 0, prompt, []))
        if result.status == "error":
            raise EvalError(
                f"the warm-up run of mode {mode} on {model or 'the default model'} failed: {result.error}"
            )
        if result.status == "timeout":
            self._warnings.append(f"the warm-up run timed out: {result.error}")
        return self._warnings

    def run(self, run: Run) -> RunResult:
        self.ws.log.unlink(missing_ok=True)
        params: dict[str, Any] = {
            "prompt": run.prompt,
            "cwd": str(self.ws.path),
            "agent": str(self.ws.agent(run.mode)),
            "yolo": True,
            "interactive": False,
        }
        if run.model:
            params["model"] = run.model
        started_at = time.monotonic()
        try:
            started = self.client.call("session.prompt", params)
        except RPCError as exc:
            raise EvalError(exc.message) from None
        sid = started["session_id"]
        result = RunResult(
            model=run.model,
            mode=run.mode,
            case=run.case,
            lang=run.lang,
            run=run.run,
            ok=False,
            seconds=0.0,
            status="",
            argv=[],
            expected=run.expected,
            session_id=sid,
        )
        self._warnings = []
        try:
            ended = self._follow(sid, started["after_seq"], started_at + self.timeout, result)
        except KeyboardInterrupt:  # Ctrl-C: the daemon must not go on with this run
            with contextlib.suppress(RPCError, DaemonError):
                self.client.call("session.cancel", {"session_id": sid})
            raise
        result.seconds = round(time.monotonic() - started_at, 3)
        if ended is None:
            result.status = "timeout"
            result.error = f"no answer within {self.timeout:g} s; the turn was cancelled"
        else:
            result.status = ended["status"]
            result.text = ended.get("text") or ""
            result.error = ended.get("error")
        with contextlib.suppress(RPCError):
            self.client.call("session.unsubscribe", {"session_id": sid})
        result.argv = self.ws.read_log()
        result.ok = judge(result.argv, run.expected)
        return result

    def _follow(self, sid: str, after_seq: int, deadline: float, result: RunResult) -> dict[str, Any] | None:
        """Collect the turn's events until it ends; cancel it at the deadline (then return None)."""
        cancelled = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if cancelled:
                    raise EvalError(
                        f"session {sid} did not end {CANCEL_GRACE:g} s after it was cancelled; "
                        "see the daemon's log (mm daemon status)"
                    )
                self.client.call("session.cancel", {"session_id": sid})
                cancelled, deadline = True, time.monotonic() + CANCEL_GRACE
                continue
            try:
                ev = self.client.next_event(sid, after_seq, timeout=remaining)
            except TimeoutError:
                continue
            kind, data = ev["kind"], ev["data"]
            if kind == "turn_started":  # the model as the daemon names it (an alias resolved)
                result.model = data.get("model", "")
            elif kind == "tool_call":
                result.tool_calls.append({"name": data["name"], "arguments": data["arguments"]})
            elif kind == "recovered_tool_call":
                result.recovered += 1
            elif kind == "skill_chosen":
                result.skill = data.get("skill") or "none"
            elif kind == "assistant":
                result.add_step(data.get("timings"))
            elif kind == "warning":
                self._warnings.append(data.get("message", ""))
            elif kind == "turn_ended":
                return None if cancelled else data


def run_all(
    client: Client,
    workspace: Workspace,
    runs: list[Run],
    *,
    timeout: float,
    warmup: bool = True,
    on_start: Callable[[Run, str], None] = lambda run, what: None,
    on_result: Callable[[RunResult], None] = lambda r: None,
    on_warning: Callable[[str], None] = lambda w: None,
) -> list[RunResult]:
    """Run every planned run in order; one untimed warm-up first for each model and mode."""
    runner = Runner(client, workspace, timeout)
    warmed: set[tuple[str, str]] = set()
    results = []
    for run in runs:
        if warmup and (run.model, run.mode) not in warmed:
            warmed.add((run.model, run.mode))
            on_start(run, "warm-up")
            for warning in runner.warm_up(run.model, run.mode, run.prompt):
                on_warning(f"{run.mode}: {warning}")
        on_start(run, "run")
        result = runner.run(run)
        results.append(result)
        on_result(result)
    return results


# -- reporting -------------------------------------------------------------------------------


@dataclass
class Cell:
    successes: int = 0
    runs: int = 0
    seconds: list[float] = field(default_factory=list)
    # Of the runs whose server reported timings: seconds per run, and the prompts' tokens.
    prompt_seconds: list[float] = field(default_factory=list)
    gen_seconds: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, r: RunResult) -> None:
        self.runs += 1
        self.successes += r.ok
        self.seconds.append(r.seconds)
        if r.prompt_seconds is not None:
            self.prompt_seconds.append(r.prompt_seconds)
            self.gen_seconds.append(r.gen_seconds or 0.0)
            self.prompt_tokens += r.prompt_tokens or 0
            self.cached_tokens += r.cached_tokens or 0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.seconds) if self.seconds else 0.0

    @property
    def timed(self) -> bool:
        """Whether any run's server reported where the time went."""
        return bool(self.prompt_seconds)

    def text(self, timing: bool = True) -> str:
        score = f"{self.successes}/{self.runs}"
        return f"{score} ({self.mean:.1f} s)" if timing else score

    def speed(self) -> str:
        """Mean prompt-processing + generation seconds per run, and the share of prompt tokens cached."""
        if not self.timed:
            return "-"
        cached = 100 * self.cached_tokens // self.prompt_tokens if self.prompt_tokens else 0
        pp, gen = statistics.fmean(self.prompt_seconds), statistics.fmean(self.gen_seconds)
        return f"{pp:.1f} + {gen:.1f} s, {cached}% cached"

    def speed_json(self) -> dict[str, Any]:
        if not self.timed:
            return {
                "mean_prompt_seconds": None,
                "mean_gen_seconds": None,
                "prompt_tokens": None,
                "cached_tokens": None,
            }
        return {
            "mean_prompt_seconds": round(statistics.fmean(self.prompt_seconds), 2),
            "mean_gen_seconds": round(statistics.fmean(self.gen_seconds), 2),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
        }


def _cells(results: list[RunResult], key: Callable[[RunResult], tuple[Any, ...]]) -> dict[Any, Cell]:
    cells: dict[Any, Cell] = {}
    for r in results:
        cells.setdefault(key(r), Cell()).add(r)
    return cells


def _ordered(values: Iterator[str]) -> list[str]:
    return list(dict.fromkeys(values))


def summary(results: list[RunResult]) -> list[dict[str, Any]]:
    """Successes, runs and mean seconds per model and mode; where the time went, if the server said."""
    cells = _cells(results, lambda r: (r.model, r.mode))
    return [
        {
            "model": model,
            "mode": mode,
            "successes": c.successes,
            "runs": c.runs,
            "mean_seconds": round(c.mean, 2),
            **c.speed_json(),
        }
        for (model, mode), c in cells.items()
    ]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, padded so that it also reads well in a terminal."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]
    )


def report(results: list[RunResult], mode_labels: dict[str, str] | None = None) -> str:
    """The seed's table (successes / runs and mean seconds, per model and mode), then per case."""
    labels = mode_labels or {}
    models = _ordered(r.model for r in results)
    modes = _ordered(r.mode for r in results)
    by_mode = _cells(results, lambda r: (r.model, r.mode))
    main = table(
        ["Model", *(labels.get(m, m) for m in modes)],
        [[model, *(by_mode[model, m].text() for m in modes)] for model in models],
    )
    by_case = _cells(results, lambda r: (r.model, r.case, r.lang, r.mode))
    keys = _ordered(f"{r.case}\0{r.lang}" for r in results)
    rows = []
    for model in models:
        for key in keys:
            case, lang = key.split("\0")
            cells = [by_case.get((model, case, lang, m)) for m in modes]
            rows.append([model, case, lang, *(c.text(timing=False) if c else "-" for c in cells)])
    detail = table(["Model", "Case", "Lang", *(labels.get(m, m) for m in modes)], rows)
    text = f"{main}\n\nBy case:\n\n{detail}"
    if any(c.timed for c in by_mode.values()):
        speed = table(
            ["Model", *(labels.get(m, m) for m in modes)],
            [[model, *(by_mode[model, m].speed() for m in modes)] for model in models],
        )
        text += f"\n\nMean seconds per run in prompt processing + generation, and prompt tokens cached:\n\n{speed}"
    return text


def describe_failure(r: RunResult) -> str:
    """Why a run failed, in one line."""
    where = f"{r.model} {r.mode} {r.case}/{r.lang} #{r.run}"
    if r.argv:
        got = "; ".join(" ".join(a) for a in r.argv)
        return f"{where}: ran `{got}`, expected `{' '.join(r.expected)}`"
    if r.error:
        return f"{where}: {r.status}: {r.error}"
    calls = ", ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in r.tool_calls)
    if calls:
        return f"{where}: the action never ran; tool calls: {calls}"
    return f"{where}: no tool call ({r.status}); answered: {r.text[:120]!r}"


def as_json(fixture: Fixture, results: list[RunResult], workspace: Path | None) -> dict[str, Any]:
    return {
        "fixture": str(fixture.root),
        "workspace": str(workspace) if workspace else None,
        "summary": summary(results),
        "runs": [asdict(r) for r in results],
    }
