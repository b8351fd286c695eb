"""Placeholders end to end: mm tools check and a real daemon refuse what the placeholder checks refuse.

The checks themselves, generated, are in tests/unit/tools/test_placeholders.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ..conftest import run_mm
from .serves import assert_daemon_serves

# The values of the finding: each reached the program as an option (5/5).
FINDING = ["-rf", "--force", "--", "-", "-x=1"]


def rec_agent(work: Path) -> Path:
    (work / "rec").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "with open('rec.log', 'a') as log:\n    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "print('recorded')\n"
    )
    (work / "rec").chmod(0o755)
    spec = {
        "tools": [
            {
                "name": "rec",
                "description": "Record two values joined.",
                "command": ["./rec", "{{d}}{{e}}"],
                "parameters": {"d": {"required": True}, "e": {"required": True}},
                "effects": "read",
            },
            {
                "name": "rec_dash",
                "description": "Record two values around a dash.",
                "command": ["./rec", "{{a}}-{{b}}"],
                "parameters": {"a": {"required": True}, "b": {"required": True}},
                "effects": "read",
            },
        ]
    }
    path = work / "agent.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_mm_tools_check_refuses_an_allow_dash_value_with_another_joined(mm_home: Path, daemon: Any) -> None:
    work = mm_home / "work"
    ok = work / "ok.yaml"
    tool = {"name": "rec", "description": "Record.", "command": ["./rec", "{{d}}{{e}}"]}
    ok.write_text(yaml.safe_dump({"tools": [{**tool, "parameters": {"d": {}, "e": {}}}]}))
    checked = run_mm("tools", "check", "ok.yaml", cwd=work)
    assert checked.returncode == 0, checked.stderr
    bad = work / "bad.yaml"
    bad.write_text(yaml.safe_dump({"tools": [{**tool, "parameters": {"d": {"allow_dash": True}, "e": {}}}]}))
    checked = run_mm("tools", "check", "bad.yaml", cwd=work)
    assert checked.returncode == 1
    assert f"{bad}:" in checked.stderr and "tools[0].command[1]" in checked.stderr
    assert "{{d}} has allow_dash" in checked.stderr and 'put "{{d}}" in an entry of its own' in checked.stderr
    assert_daemon_serves(mm_home)


def test_the_daemon_never_passes_an_option_and_tells_the_model_what_to_send(
    mm_home: Path, scripted: Any, daemon: Any
) -> None:
    work = mm_home / "work"
    rec_agent(work)
    calls = [{"name": "rec", "arguments": {"d": "", "e": v}} for v in FINDING]
    calls += [
        {"name": "rec", "arguments": {"d": "-rf", "e": ""}},
        {"name": "rec_dash", "arguments": {"a": "", "b": "rf"}},
        {"name": "rec", "arguments": {"d": "ok", "e": "-rf"}},  # safe: the argument is "ok-rf"
    ]
    server = scripted([{"tool_calls": calls}, {"text": "done"}])
    result = run_mm("--agent", "agent.yaml", "-p", "record", cwd=work)
    assert result.returncode == 0, result.stderr
    received = [json.loads(line) for line in (work / "rec.log").read_text().splitlines()]
    assert received == [["ok-rf"]]  # the one safe call ran; nothing else reached the program
    answers = [m["content"] for m in server.requests()[-1]["body"]["messages"] if m["role"] == "tool"]
    assert len(answers) == len(calls)
    for answer in answers[:5]:
        assert answer.startswith("rec was not run") or "leading_dash" in answer
        assert '"field": "e"' in answer and "Send e without the leading '-'" in answer
    assert '"field": "d"' in answers[5]
    assert '"field": "a"' in answers[6] and "Give a a value that does not start with '-'" in answers[6]
    assert answers[7].startswith("recorded")
    assert_daemon_serves(mm_home)
