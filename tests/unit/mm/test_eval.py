"""``mm eval``'s fixture format, its plan and report, and the judging from the actions' log, in process.

Whole evals through a real daemon are in tests/e2e/test_eval.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from mm.eval import Fixture, FixtureError, RunResult, judge, load_fixture, plan, report

from mmd.api.eval import check

from ...paths import ROOT

CONTRIB = ROOT / "contrib" / "eval"


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
