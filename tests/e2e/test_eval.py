"""``mm eval``: whole evals run through a real daemon against scripted models (the shipped
contrib/eval and contrib/eval-ops fixtures, their real MCP stand-in servers included). The fixture format, the plan, the
report and the judging alone are in tests/unit/mm/test_eval.py; the run with the real local model
is in test_local.py.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from ..paths import FIXTURES, ROOT
from .conftest import run_mm, spawn_mm

CONTRIB = ROOT / "contrib" / "eval"
OPS = ROOT / "contrib" / "eval-ops"


def script(home: Path, name: str, steps: list[dict[str, Any]]) -> str:
    """A scripted model for `-m`: each session replays *steps* from the start."""
    path = home / f"{name}.json"
    path.write_text(json.dumps({"responses": steps}))
    return f"scripted:{path}"


def call(name: str, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": name, "arguments": arguments}]}, {"text": "Done."}]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def eval_json(*args: str, cwd: Path, timeout: float = 180) -> dict[str, Any]:
    result = run_mm("eval", *args, "--json", cwd=cwd, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# -- the fixture ---------------------------------------------------------------------------


def test_a_folder_without_eval_yaml_says_what_a_fixture_is(mm_home: Path) -> None:
    result = run_mm("eval", str(mm_home), cwd=mm_home)
    assert result.returncode == 1
    assert "no eval.yaml here" in result.stderr and "contrib/eval is an example" in result.stderr


# -- judging -------------------------------------------------------------------------------


# -- whole evals through the daemon ----------------------------------------------------------


def test_declared_and_mcp_modes_judged_from_the_actions_log(mm_home: Path) -> None:
    model = script(mm_home, "release", call("release", version="1.4.2", channel="beta"))
    out = eval_json(
        str(CONTRIB), "-m", model, "--mode", "declared", "--mode", "mcp", "--case", "release",
        "--case", "pkgtest", "-n", "2", cwd=mm_home / "work",
    )  # fmt: skip
    cells = {(s["mode"]): s for s in out["summary"]}
    # The model always releases: right for the release case (en + fr, 2 runs), wrong for pkgtest.
    assert {m: (c["successes"], c["runs"]) for m, c in cells.items()} == {"declared": (4, 8), "mcp": (4, 8)}
    runs = out["runs"]
    assert len(runs) == 16
    for r in runs:
        assert r["argv"] == [["release", "1.4.2", "beta"]], r  # what the action itself wrote
        assert r["ok"] == (r["case"] == "release")
        assert r["status"] == "ok" and r["seconds"] > 0
        [made] = r["tool_calls"]
        assert (made["name"], json.loads(made["arguments"])) == (
            "release",
            {"version": "1.4.2", "channel": "beta"},
        )
    assert {r["model"] for r in runs} == {"scripted/release.json"}
    # The runs wrote into a scratch copy, removed at the end; contrib/eval received no log.
    assert out["workspace"] is None
    assert not (CONTRIB / "argv.log").exists()


def test_skill_mode_runs_the_command_with_bash_and_the_table_names_failures(mm_home: Path) -> None:
    steps = [
        {"tool_calls": [{"name": "read_skill", "arguments": {"name": "release-ops"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/release 1.4.2 beta"}}]},
        {"text": "Released."},
    ]
    model = script(mm_home, "skill", steps)
    result = run_mm(
        "eval", str(CONTRIB), "-m", model, "--mode", "skill", "--case", "release", "--case", "status",
        "--lang", "fr", "-n", "1", cwd=mm_home / "work", timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [cells(line) for line in result.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == ["Model", "skill"]
    assert rows[1][0] == "scripted/skill.json" and rows[1][1].startswith("1/2 (")
    assert ["scripted/skill.json", "release", "fr", "1/1"] in rows
    assert ["scripted/skill.json", "status", "fr", "0/1"] in rows
    # Progress without a terminal: one line per run on stderr.
    assert "mm eval: 1/2 scripted/skill.json skill release/fr #1: ok, " in result.stderr
    assert "mm eval: 2/2 scripted/skill.json skill status/fr #1: failed, " in result.stderr
    assert (
        "scripted/skill.json skill status/fr #1: ran `release 1.4.2 beta`, expected `status billing`"
        in result.stdout
    )


def test_a_model_that_only_talks_fails_and_a_slow_one_is_cancelled_at_the_timeout(mm_home: Path) -> None:
    talk = script(mm_home, "talk", [{"text": "The billing service is fine, I think."}])
    slow = script(mm_home, "slow", [{"delay": 30, "text": "too late"}])
    out = eval_json(
        str(CONTRIB), "-m", talk, "-m", slow, "--mode", "declared", "--case", "status", "--lang", "en",
        "-n", "1", "--timeout", "2", "--no-warmup", cwd=mm_home / "work",
    )  # fmt: skip
    talked, late = out["runs"]
    assert (talked["ok"], talked["status"], talked["argv"], talked["tool_calls"]) == (False, "ok", [], [])
    assert talked["text"] == "The billing service is fine, I think."
    assert (late["ok"], late["status"]) == (False, "timeout")
    assert 2 <= late["seconds"] < 30
    # The cancelled session is not left running in the daemon.
    sessions = json.loads(run_mm("sessions", "list", "--json", cwd=mm_home / "work").stdout)
    assert not any(s["running"] for s in sessions)


def test_the_second_fixture_runs_its_integer_call_in_every_mode(mm_home: Path) -> None:
    # The declared tool and the MCP server both turn the integer 7 into the argv "7"; skill mode runs bash.
    typed = script(mm_home, "scale", call("scale", service="checkout", replicas=7))
    out = eval_json(
        str(OPS), "-m", typed, "--mode", "declared", "--mode", "mcp", "--case", "scale", "--case", "ticket",
        "--lang", "de", "-n", "1", cwd=mm_home / "work",
    )  # fmt: skip
    assert [(r["mode"], r["case"], r["ok"]) for r in out["runs"]] == [
        ("declared", "scale", True),
        ("declared", "ticket", False),
        ("mcp", "scale", True),
        ("mcp", "ticket", False),
    ]
    assert all(r["argv"] == [["scale", "checkout", "7"]] for r in out["runs"])
    steps = [
        {"tool_calls": [{"name": "read_skill", "arguments": {"name": "platform-ops"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/ticket SUP-4821"}}]},
        {"text": "SUP-4821 is open."},
    ]
    [run] = eval_json(
        str(OPS), "-m", script(mm_home, "skill", steps), "--mode", "skill", "--case", "ticket", "--lang", "fr",
        "-n", "1", "--no-warmup", cwd=mm_home / "work",
    )["runs"]  # fmt: skip
    assert (run["ok"], run["argv"]) == (True, [["ticket", "SUP-4821"]])


def test_llama_server_timings_are_summed_per_run(mm_home: Path) -> None:
    # The scripted server sends `timings` as llama-server does, in the last event of each step.
    first = {"cache_n": 300, "prompt_n": 150, "prompt_ms": 900.0, "predicted_n": 30, "predicted_ms": 1500.0}
    second = {"cache_n": 470, "prompt_n": 40, "prompt_ms": 200.0, "predicted_n": 10, "predicted_ms": 500.0}
    steps = [
        {"tool_calls": [{"name": "backup", "arguments": {"database": "orders"}}], "timings": first},
        {"text": "Done.", "timings": second},
    ]
    out = eval_json(
        str(OPS), "-m", script(mm_home, "timed", steps), "--mode", "declared", "--case", "backup",
        "--lang", "en", "-n", "1", "--no-warmup", cwd=mm_home / "work",
    )  # fmt: skip
    [run] = out["runs"]
    assert run["ok"] and run["steps"] == 2
    assert (run["prompt_tokens"], run["cached_tokens"], run["gen_tokens"]) == (960, 770, 40)
    assert (run["prompt_seconds"], run["gen_seconds"]) == (1.1, 2.0)
    [cell] = out["summary"]
    assert (cell["mean_prompt_seconds"], cell["mean_gen_seconds"], cell["cached_tokens"]) == (1.1, 2.0, 770)
    # A server without timings (OpenAI, the scripted server by default): null, not zero.
    [plain] = eval_json(
        str(OPS), "-m", script(mm_home, "plain", call("backup", database="orders")), "--mode", "declared",
        "--case", "backup", "--lang", "en", "-n", "1", "--no-warmup", cwd=mm_home / "work",
    )["runs"]  # fmt: skip
    assert (plain["steps"], plain["prompt_seconds"], plain["cached_tokens"]) == (2, None, None)


def test_a_model_that_cannot_start_stops_the_eval_at_the_warm_up(mm_home: Path) -> None:
    result = run_mm("eval", str(CONTRIB), "-m", "nosuch/model", "-n", "1", cwd=mm_home / "work")
    assert result.returncode == 1
    assert "nosuch" in result.stderr
    assert "the eval stopped after 0 of 18 runs" in result.stderr


def test_the_fixture_copy_keeps_the_log_with_keep(mm_home: Path, tmp_path: Path) -> None:
    fixture = tmp_path / "fx"
    shutil.copytree(CONTRIB, fixture)
    model = script(mm_home, "status", call("status", service="billing"))
    out = eval_json(
        str(fixture), "-m", model, "--mode", "declared", "--case", "status", "--lang", "en", "-n", "1", "--keep",
        cwd=mm_home / "work",
    )  # fmt: skip
    kept = Path(out["workspace"])
    try:
        assert json.loads((kept / "argv.log").read_text()) == {"argv": ["status", "billing"]}
        assert not (fixture / "argv.log").exists()
    finally:
        shutil.rmtree(kept)


def test_a_skill_called_as_a_tool_is_answered_with_how_to_read_it(mm_home: Path) -> None:
    # Step 1 is what Qwen2.5-Coder-0.5B really wrote in skill mode (tests/fixtures/recovery/captured).
    written = (FIXTURES / "recovery/captured/skill_called_as_tool.txt").read_text()
    steps = [
        {"text": written},
        {"tool_calls": [{"name": "read_skill", "arguments": {"name": "release-ops"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/release 1.4.2 beta"}}]},
        {"text": "Released."},
    ]
    model = script(mm_home, "skill-as-tool", steps)
    out = eval_json(
        str(CONTRIB), "-m", model, "--mode", "skill", "--case", "release", "--lang", "fr", "-n", "1",
        "--no-warmup", cwd=mm_home / "work",
    )  # fmt: skip
    [run] = out["runs"]
    assert run["ok"], run
    assert run["recovered"] == 1
    assert [c["name"] for c in run["tool_calls"]] == ["release-ops", "read_skill", "bash"]
    shown = json.loads(run_mm("sessions", "show", run["session_id"], "--json", cwd=mm_home).stdout)
    first = next(m for m in shown["messages"] if m["role"] == "tool")
    assert '"release-ops" is a skill, not a tool' in first["content"]
    assert 'Call read_skill with {"name": "release-ops"}' in first["content"]


def test_ctrl_c_cancels_the_running_session_and_exits_130(mm_home: Path) -> None:
    work = mm_home / "work"
    steps = [
        {"tool_calls": [{"name": "status", "arguments": {"service": "billing"}}]},
        {"delay": 60, "text": "x"},
    ]
    model = script(mm_home, "stuck", steps)
    mm = spawn_mm(
        "eval", str(CONTRIB), "-m", model, "--mode", "declared", "--case", "status", "--lang", "en", "-n", "3",
        "--no-warmup", cwd=work,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the first run called its tool: its model step now hangs
        rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout or "[]")
        if (
            rows
            and json.loads(run_mm("sessions", "show", rows[0]["id"], "--json", cwd=work).stdout)["messages"][
                2:
            ]
        ):
            break
        time.sleep(0.2)
    mm.send_signal(signal.SIGINT)
    _, err = mm.communicate(timeout=30)
    assert mm.returncode == 130, err
    assert "interrupted after 0 of 3 runs" in err
    [row] = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = json.loads(run_mm("sessions", "show", row["id"], "--json", cwd=work).stdout)
    assert not shown["session"]["running"]
    assert [e["data"]["status"] for e in shown["events"] if e["kind"] == "turn_ended"] == ["cancelled"]
