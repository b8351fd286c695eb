"""``mm eval``'s fixture format, its plan and report, and the judging from the actions' log, in process.

Whole evals through a real daemon are in tests/e2e/test_eval.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mm.eval import Fixture, FixtureError, RunResult, judge, load_fixture, plan, report, summary

from mmd.api.eval import check

from ...paths import ROOT

CONTRIB = ROOT / "contrib" / "eval"
OPS = ROOT / "contrib" / "eval-ops"


class InProcess:
    """A client whose eval.load is answered as the daemon answers it, without a daemon."""

    def call(self, method: str, params: dict[str, Any]) -> Any:
        assert method == "eval.load"
        return msgspec.to_builtins(check(Path(params["path"])))


def fixture_at(path: Path) -> Fixture:
    return load_fixture(InProcess(), path)  # type: ignore[arg-type]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def bad_fixture(tmp_path: Path, text: str) -> Path:
    (tmp_path / "agent.yaml").write_text("builtins: []\n")
    (tmp_path / "eval.yaml").write_text(text)
    return tmp_path


def test_the_shipped_fixture_is_the_seeds_measurement() -> None:
    fixture = fixture_at(CONTRIB)
    spec = fixture.spec
    assert spec.runs == 5
    assert list(spec.modes) == ["declared", "skill", "mcp"]
    assert {c.name: c.expect for c in spec.cases} == {
        "release": ["release", "1.4.2", "beta"],
        "pkgtest": ["pkgtest", "greet"],
        "status": ["status", "billing"],
    }
    assert all(set(c.prompts) == {"en", "fr"} for c in spec.cases)
    assert len(plan(fixture, ["m"])) == 3 * 3 * 2 * 5


def test_the_second_fixture_asks_for_values_its_tools_never_show() -> None:
    fixture = fixture_at(OPS)
    spec = fixture.spec
    assert (spec.runs, list(spec.modes)) == (5, ["declared", "skill", "mcp"])  # comparable with contrib/eval
    assert {c.name: c.expect for c in spec.cases} == {
        "backup": ["backup", "orders"],
        "scale": ["scale", "checkout", "7"],
        "ticket": ["ticket", "SUP-4821"],
    }
    assert all(set(c.prompts) == {"en", "fr", "de"} for c in spec.cases)
    assert len(plan(fixture, ["m"])) == 3 * 3 * 3 * 5  # 45 runs per mode
    for case in spec.cases:
        assert all(value in prompt for prompt in case.prompts.values() for value in case.expect[1:]), case
    # No agent file, skill or server of the fixture shows a value a prompt asks for.
    shown = [p for p in OPS.rglob("*") if p.is_file() and p.name != "eval.yaml"]
    for value in ("orders", "checkout", "7", "SUP-4821", "4821"):
        used = [
            str(p.relative_to(OPS)) for p in shown if re.search(rf"\b{re.escape(value)}\b", p.read_text())
        ]
        assert not used, f"{value} is shown in {used}"


def test_the_second_fixtures_actions_record_their_argv(tmp_path: Path) -> None:
    log = tmp_path / "argv.log"
    env = {**os.environ, "MM_ARGV_LOG": str(log)}
    for argv in (
        ["backup", "orders"],
        ["scale", "checkout", "7"],
        ["ticket", "SUP-4821"],
        ["scale", "x", "many"],
    ):
        done = subprocess.run(
            [str(OPS / "actions" / argv[0]), *argv[1:]], env=env, capture_output=True, text=True
        )
        assert done.returncode == (1 if argv[-1] == "many" else 0), done.stderr
    assert [json.loads(line)["argv"] for line in log.read_text().splitlines()] == [
        ["backup", "orders"],
        ["scale", "checkout", "7"],
        ["ticket", "SUP-4821"],
        ["scale", "x", "many"],  # recorded before it is refused: the judge sees every run
    ]


def test_plan_filters_and_refuses_what_the_fixture_lacks() -> None:
    fixture = fixture_at(CONTRIB)
    runs = plan(fixture, ["a", "b"], runs=2, modes=["mcp"], cases=["status"], langs=["fr"])
    assert [(r.model, r.mode, r.case, r.lang, r.run) for r in runs] == [
        ("a", "mcp", "status", "fr", 1),
        ("a", "mcp", "status", "fr", 2),
        ("b", "mcp", "status", "fr", 1),
        ("b", "mcp", "status", "fr", 2),
    ]
    assert runs[0].prompt == "Quel est l'état du service billing ?"
    with pytest.raises(FixtureError, match='no mode "shell"; it has: declared, mcp, skill'):
        plan(fixture, ["a"], modes=["shell"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "modes: {a: agent.yaml}\ncases:\n  - name: x\n    expect: [x, 2.0]\n    prompts: {en: hi}\n",
            r"eval.yaml:4: cases\[0\].expect\[1\]: expected a string, found a number \(2.0\)",
        ),
        (
            "modes: {a: missing.yaml}\ncases: [{name: x, expect: [x], prompts: {en: hi}}]\n",
            r"eval.yaml:1: modes.a: .*missing.yaml does not exist",
        ),
        (
            "modes: {a: agent.yaml}\ncases:\n  - {name: x, expect: [x], prompts: {en: hi}}\n"
            "  - {name: x, expect: [y], prompts: {en: ho}}\n",
            r'eval.yaml:4: cases\[1\].name: "x" is used twice',
        ),
        (
            "modes: {a: agent.yaml}\nrun: 3\ncases: [{name: x, expect: [x], prompts: {en: hi}}]\n",
            r'eval.yaml:2: run: .*did you mean "runs"',
        ),
    ],
)
def test_a_bad_fixture_names_file_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(FixtureError, match=expected):
        fixture_at(bad_fixture(tmp_path, text))


def test_a_broken_agent_variant_is_reported_before_any_run(tmp_path: Path) -> None:
    fixture = bad_fixture(
        tmp_path, "modes: {a: agent.yaml}\ncases: [{name: x, expect: [x], prompts: {en: hi}}]\n"
    )
    (fixture / "agent.yaml").write_text(
        "builtins: [bash]\ntools:\n  - name: t\n    description: d\n    command: ['{{p}}']\n"
    )
    with pytest.raises(
        FixtureError, match=r"agent.yaml:5: tools\[0\].command\[0\]: the program must be literal"
    ):
        fixture_at(fixture)


def test_a_run_succeeds_only_when_every_logged_argv_is_the_expected_one() -> None:
    want = ["release", "1.4.2", "beta"]
    assert judge([want], want)
    assert judge([want, want], want)  # run twice with the same arguments: still right
    assert not judge([], want)  # never ran
    assert not judge([["release", "1.4.2 beta"]], want)  # packed into one argument
    assert not judge([["release", "--help"], want], want)  # a wrong run first counts


def test_the_report_is_the_seeds_table_then_per_case() -> None:
    def result(mode: str, case: str, ok: bool, seconds: float) -> RunResult:
        return RunResult("m1", mode, case, "en", 1, ok, seconds, "ok", [], [])

    text = report(
        [
            result("declared", "release", True, 1.0),
            result("declared", "release", True, 2.0),
            result("skill", "release", False, 6.0),
            result("skill", "release", True, 4.0),
        ]
    )
    lines = text.splitlines()
    assert cells(lines[0]) == ["Model", "declared", "skill"]
    assert set(lines[1]) == {"|", "-"}
    assert cells(lines[2]) == ["m1", "2/2 (1.5 s)", "1/2 (5.0 s)"]
    assert ["m1", "release", "en", "2/2", "1/2"] in [cells(line) for line in lines if line.startswith("| ")]
    # Padded: every line of a table has the same width.
    assert len({len(line) for line in lines[:3]}) == 1


def test_a_runs_timings_are_summed_over_its_steps_and_reported_per_mode() -> None:
    def step(prompt: int, cached: int, pp_ms: float, gen: int, gen_ms: float) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "prompt_ms": pp_ms,
            "gen_tokens": gen,
            "gen_ms": gen_ms,
        }

    timed = RunResult("m1", "declared", "release", "en", 1, True, 3.0, "ok", [], [])
    timed.add_step(step(600, 0, 1500.0, 30, 900.0))  # the first step: nothing cached yet
    timed.add_step(step(650, 600, 120.0, 10, 300.0))  # the second reuses the first's prompt
    assert (timed.steps, timed.prompt_tokens, timed.cached_tokens, timed.gen_tokens) == (2, 1250, 600, 40)
    assert (timed.prompt_seconds, timed.gen_seconds) == (1.62, 1.2)
    untimed = RunResult("m1", "skill", "release", "en", 1, False, 2.0, "ok", [], [])
    untimed.add_step(None)  # a server that reports no timings: counted as a step, nothing else
    assert (untimed.steps, untimed.prompt_seconds, untimed.cached_tokens) == (1, None, None)
    declared, skill = summary([timed, untimed])
    assert declared["mean_prompt_seconds"] == 1.62 and declared["mean_gen_seconds"] == 1.2
    assert (declared["prompt_tokens"], declared["cached_tokens"]) == (1250, 600)
    assert skill["mean_prompt_seconds"] is None and skill["cached_tokens"] is None
    lines = report([timed, untimed]).splitlines()
    speed = lines[lines.index(next(line for line in lines if line.startswith("Mean seconds per run"))) + 2 :]
    assert cells(speed[0]) == ["Model", "declared", "skill"]
    assert cells(speed[2]) == ["m1", "1.6 + 1.2 s, 48% cached", "-"]


def test_the_report_has_no_speed_table_when_no_server_reported_timings() -> None:
    run = RunResult("m1", "declared", "release", "en", 1, True, 3.0, "ok", [], [])
    run.add_step(None)
    assert "prompt processing" not in report([run])
