"""The real ``mm`` CLI against a real daemon and a scripted model server (all separate processes)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mmd import __version__

from ..process_trees import gone
from .conftest import (
    daemon_pids,
    needs_nvim,
    nvim_request,
    run_mm,
    socket_of,
    spawn_mm,
    wait_for_file,
    write_config,
)
from .test_consent import run_on_pty


def test_prompt_prints_the_answer_and_starts_the_daemon(mm_home, scripted):
    server = scripted([{"text": "Hello from the script."}])
    result = run_mm("-p", "say hello", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the script.\n"
    assert len(daemon_pids(mm_home)) == 1
    body = server.requests()[0]["body"]
    assert body["messages"][-1] == {"role": "user", "content": "say hello"}
    assert body["stream"] is True


def test_prompt_from_stdin(mm_home, scripted):
    server = scripted([{"text": "ok"}])
    result = run_mm("-p", "summarise:", input="line one\nline two\n", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    # As Claude Code joins them: the prompt, a newline, then what was piped.
    assert server.requests()[0]["body"]["messages"][-1]["content"] == "summarise:\nline one\nline two\n"


def test_tool_call_echo_goes_to_stderr_answer_to_stdout(mm_home, scripted):
    server = scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo from-the-tool; exit 3"}}]},
            {"text": "The command failed with 3."},
        ]
    )
    result = run_mm("--yolo", "-p", "run it", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The command failed with 3.\n"
    assert "$ echo from-the-tool; exit 3" in result.stderr
    assert "from-the-tool" in result.stderr
    assert "\033[" not in result.stderr  # not a TTY: plain echo
    tool_msg = server.requests()[1]["body"]["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert tool_msg["content"] == "from-the-tool\n[exit code 3]"


def test_several_tool_calls_in_one_response_run_in_order(mm_home, scripted):
    work = mm_home / "work"
    server = scripted(
        [
            {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo one >> order.txt"}},
                    {"name": "bash", "arguments": {"command": "echo two >> order.txt"}},
                ]
            },
            {"text": "done"},
        ]
    )
    result = run_mm("--yolo", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "order.txt").read_text() == "one\ntwo\n"
    roles = [m["role"] for m in server.requests()[1]["body"]["messages"]]
    assert roles[-3:] == ["assistant", "tool", "tool"]


def test_json_output(mm_home, scripted):
    scripted([{"text": "forty-two"}])
    result = run_mm("--output-format", "json", "-p", "answer", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["status"] == "ok" and out["result"] == "forty-two" and len(out["session_id"]) == 12
    assert (out["type"], out["subtype"], out["is_error"]) == ("result", "success", False)


def test_events_output_is_one_event_per_line(mm_home, scripted):
    # mm's own event stream (what --output-format stream-json printed before it took Claude Code's shape).
    scripted([{"text": "a b c"}])
    result = run_mm("--output-format", "events", "-p", "x", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_ended"
    assert "".join(e["data"]["text"] for e in events if e["kind"] == "text") == "a b c"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_continue_and_resume_keep_the_conversation(mm_home, scripted):
    server = scripted([{"text": "first"}, {"text": "second"}, {"text": "third"}])
    work = mm_home / "work"
    first = json.loads(run_mm("--output-format", "json", "-p", "one", cwd=work).stdout)
    assert run_mm("--continue", "-p", "two", cwd=work).returncode == 0
    assert run_mm("--resume", first["session_id"][:6], "-p", "three", cwd=work).returncode == 0
    contents = [m["content"] for m in server.requests()[2]["body"]["messages"] if m["role"] != "system"]
    assert contents == ["one", "first", "two", "second", "three"]


def test_sessions_list_and_show(mm_home, scripted):
    scripted([{"text": "the answer"}])
    work = mm_home / "work"
    run_mm("-p", "a question\nwith two lines", cwd=work)
    listed = run_mm("sessions", "list", "--json", cwd=work)
    rows = json.loads(listed.stdout)
    assert len(rows) == 1 and rows[0]["title"] == "a question" and rows[0]["cwd"] == str(work)
    shown = run_mm("sessions", "show", rows[0]["id"], cwd=work)
    assert "user: a question" in shown.stdout and "assistant: the answer" in shown.stdout
    missing = run_mm("sessions", "show", "zzzz", cwd=work)
    assert missing.returncode == 1 and "mm sessions list" in missing.stderr


def test_a_long_sessions_events_come_whole_in_pages(mm_home, scripted):
    # 450 calls of 40 KB output made one session.show answer pass the 16 MiB a client reads: `mm sessions
    # show --json` failed ("frame larger than the limit"). Its events now come 4 MiB of them at a time.
    calls = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"seq {i} {i + 9000}"}}]} for i in range(45)
    ]
    scripted([*calls, {"text": "done"}] * 10)
    work = mm_home / "work"
    assert run_mm("--yolo", "-p", "first", cwd=work).returncode == 0
    for _ in range(9):
        assert run_mm("--yolo", "-c", "-p", "again", cwd=work).returncode == 0
    [row] = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = run_mm("sessions", "show", "--json", row["id"], cwd=work)
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["data"]["status"] for e in events if e["kind"] == "turn_ended"] == ["ok"] * 10
    assert (
        sum(len(e["data"].get("text", "")) for e in events if e["kind"] == "tool_output") > 16 * 1024 * 1024
    )


def test_no_model_configured_says_what_to_do(mm_home):
    result = run_mm("-p", "hi", cwd=mm_home / "work")
    assert result.returncode == 1
    assert "no model configured" in result.stderr and "--model" in result.stderr


def test_agent_file_error_names_file_line_and_field(mm_home, scripted):
    scripted([{"text": "never"}])
    agent = mm_home / "work" / "agent.yaml"
    agent.write_text("system: hello\nyolo: true\nmodle: x/y\n")
    result = run_mm("--agent", str(agent), "-p", "hi", cwd=mm_home / "work")
    assert result.returncode == 1
    assert (
        f"{agent}:3" in result.stderr and "modle" in result.stderr and 'did you mean "model"' in result.stderr
    )


def test_config_value_of_wrong_type_is_reported_and_daemon_goes_on(mm_home, scripted):
    server = scripted([{"text": "still here"}])
    config = mm_home / "config" / "mm" / "config.yaml"
    good = config.read_text()
    config.write_text(good + "daemon:\n  max_steps: many\n")
    bad = run_mm("-p", "hi", cwd=mm_home / "work")
    line = len(good.splitlines()) + 2
    assert bad.returncode == 1
    assert f"config.yaml:{line}: daemon.max_steps: expected an integer" in bad.stderr
    config.write_text(good)
    assert run_mm("-p", "hi", cwd=mm_home / "work").stdout == "still here\n"
    assert len(server.requests()) == 1


def test_usage_error_exit_code(mm_home):
    result = run_mm("--output-format", "yaml", "-p", "x")
    assert result.returncode == 2


def test_headless_consent_denial_exits_with_the_consent_code(mm_home, scripted):
    work = mm_home / "work"
    scripted([{"tool_calls": [{"name": "bash", "arguments": {"command": "touch should-not-exist"}}]}])
    result = run_mm("-p", "make a file", cwd=work)
    assert result.returncode == 3, result.stderr
    assert "no one to ask" in result.stderr
    assert not (work / "should-not-exist").exists()


def test_read_tools_never_ask(mm_home, scripted):
    work = mm_home / "work"
    (work / "notes.txt").write_text("alpha\nbeta\n")
    server = scripted(
        [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}, {"text": "read it"}]
    )
    result = run_mm("-p", "read notes", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "beta" in server.requests()[1]["body"]["messages"][-1]["content"]


def test_model_retry_shown_and_answer_arrives(mm_home, scripted):
    scripted([{"status": 429, "retry_after": 0}, {"status": 500}, {"text": "after retries"}])
    result = run_mm("-p", "x", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "after retries\n"
    assert result.stderr.count("retrying") == 2


def test_provider_breaking_off_mid_stream_is_an_error_and_daemon_goes_on(mm_home, scripted):
    scripted([{"text": "one two three four five six", "break_after": 3}, {"text": "fine"}])
    broken = run_mm("-p", "x", cwd=mm_home / "work")
    assert broken.returncode == 1 and "broke off" in broken.stderr
    ok = run_mm("-p", "y", cwd=mm_home / "work")
    assert ok.returncode == 0 and ok.stdout == "fine\n"


def test_provider_returning_invalid_json(mm_home, scripted):
    scripted([{"raw": "this is not json"}])
    result = run_mm("-p", "x", cwd=mm_home / "work")
    assert result.returncode == 1 and "invalid JSON" in result.stderr


def test_ctrl_c_cancels_the_turn_and_kills_the_process_group(mm_home, scripted):
    work = mm_home / "work"
    scripted(
        [
            {
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "sleep 1000 & echo $! > child.pid; echo $$ > shell.pid; wait"
                        },
                    }
                ]
            },
            {"text": "never reached"},
        ]
    )
    mm = spawn_mm("--yolo", "-p", "sleep", cwd=work)
    wait_for_file(work / "child.pid")
    wait_for_file(work / "shell.pid")
    pids = [int((work / name).read_text()) for name in ("child.pid", "shell.pid")]
    mm.send_signal(signal.SIGINT)
    _, err = mm.communicate(timeout=30)
    assert mm.returncode == 130, err
    _, alive = psutil.wait_procs([_proc(p) for p in pids if _proc(p)], timeout=10)
    assert not alive
    # The turn was recorded as cancelled, and the next prompt works in the same session.
    listed = json.loads(run_mm("sessions", "show", "--json", _only_session(work), cwd=work).stdout)
    ended = [e for e in listed["events"] if e["kind"] == "turn_ended"]
    assert ended[-1]["data"]["status"] == "cancelled"


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _only_session(work: Path) -> str:
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    assert len(rows) == 1
    return rows[0]["id"]


def test_two_clients_starting_the_daemon_at_once_give_one_daemon(mm_home, scripted):
    scripted([{"text": "a"}, {"text": "b"}])
    procs = [spawn_mm("-p", "hi", cwd=mm_home / "work") for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(o[0] for o in outs) == ["a\n", "b\n"]
    # Both clients may have spawned a daemon; the loser of the socket lock exits on its own.
    deadline = time.monotonic() + 20
    while len(daemon_pids(mm_home)) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(daemon_pids(mm_home)) == 1
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=mm_home / "work").stdout)
    assert len(rows) == 2  # one daemon, one store, served both


def test_daemon_start_status_stop(mm_home):
    started = run_mm("daemon", "start")
    assert started.returncode == 0 and "running" in started.stdout
    status = json.loads(run_mm("daemon", "status", "--json").stdout)
    assert status["socket"] == str(socket_of(mm_home))
    assert psutil.pid_exists(status["pid"])
    stopped = run_mm("daemon", "stop")
    assert stopped.returncode == 0
    psutil.wait_procs([psutil.Process(status["pid"])], timeout=10)
    assert not socket_of(mm_home).exists()
    assert run_mm("daemon", "status").returncode == 1


def test_sigterm_cancels_running_turn_and_keeps_its_events(mm_home, scripted, daemon):
    work = mm_home / "work"
    scripted(
        [{"tool_calls": [{"name": "bash", "arguments": {"command": "echo $$ > shell.pid; sleep 1000"}}]}]
    )
    mm = spawn_mm("--yolo", "-p", "sleep", cwd=work)
    wait_for_file(work / "shell.pid")
    shell = psutil.Process(int((work / "shell.pid").read_text()))
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(20)
    _, err = mm.communicate(timeout=20)
    assert mm.returncode == 130, err  # the turn ended as cancelled
    psutil.wait_procs([shell], timeout=5)
    assert not shell.is_running()
    write_config(mm_home, {})  # no model: the next command only reads the store
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = json.loads(run_mm("sessions", "show", "--json", rows[0]["id"], cwd=work).stdout)
    assert shown["events"][-1]["kind"] == "turn_ended"
    assert shown["events"][-1]["data"]["status"] == "cancelled"


@pytest.mark.parametrize("signame", ["SIGKILL"])
def test_kill_9_mid_turn_then_restart_keeps_committed_events(mm_home, scripted, daemon, signame):
    work = mm_home / "work"
    scripted(
        [
            {
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "echo started; echo $$ > shell.pid; sleep 1000"},
                    }
                ]
            },
            {"text": "resumed fine"},
        ]
    )
    mm = spawn_mm("--yolo", "--output-format", "events", "-p", "go", cwd=work)
    wait_for_file(work / "shell.pid")
    shell = psutil.Process(int((work / "shell.pid").read_text()))
    time.sleep(0.2)  # let the echo event reach the client; the assertion below does not depend on it
    daemon.send_signal(getattr(signal, signame))
    daemon.wait(10)
    out, _ = mm.communicate(timeout=20)
    seen = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert seen and mm.returncode == 1
    # The daemon was killed without warning, so its tool outlived it; the next daemon stops it.
    assert shell.is_running()
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    stored = json.loads(run_mm("sessions", "show", "--json", rows[0]["id"], cwd=work).stdout)["events"]
    stored_by_seq = {e["seq"]: e for e in stored}
    for event in seen:
        assert stored_by_seq[event["seq"]]["kind"] == event["kind"]
    # Stopped: gone, or a zombie its new parent (init here, which reaps when it likes) has not reaped.
    assert gone(shell)
    again = run_mm("--continue", "-p", "and now?", cwd=work)
    assert again.returncode == 0 and again.stdout == "resumed fine\n"


def test_missing_api_key_says_which_variable(mm_home, scripted):
    server = scripted([{"text": "never"}])
    write_config(
        mm_home,
        {
            "providers": {
                "keyed": {"kind": "openai", "base_url": f"{server.url}/v1", "api_key_env": "MM_TEST_NO_KEY"}
            },
            "default_model": "keyed/scripted",
        },
    )
    result = run_mm("-p", "hi", cwd=mm_home / "work")
    assert result.returncode == 1
    assert "MM_TEST_NO_KEY" in result.stderr and "internal error" not in result.stderr
    assert server.requests() == []


def test_the_agent_files_temperature_reaches_every_model_step(mm_home, scripted):
    work = mm_home / "work"
    server = scripted(
        [{"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}, {"text": "done"}]
    )
    (work / "mm.yaml").write_text("temperature: 0\n")
    assert run_mm("-p", "look", cwd=work).returncode == 0
    assert [r["body"]["temperature"] for r in server.requests()] == [0.0, 0.0]
    (work / "mm.yaml").write_text("temperature: 3\n")
    bad = run_mm("-p", "look", cwd=work)
    assert bad.returncode == 1
    assert "mm.yaml:1: temperature: " in bad.stderr and "3" in bad.stderr


# -- -p is a flag, the prompt positional (as in Claude Code) --------------------------------------------


def _sent(server) -> list[str]:
    """The last user message of each request the model got."""
    return [r["body"]["messages"][-1]["content"] for r in server.requests()]


def test_print_flag_and_prompt_in_any_order(mm_home, scripted):
    server = scripted([{"text": "done"}] * 6)
    work = mm_home / "work"
    orders = [
        ("-p", "--yolo", "Deploy the site"),
        ("Deploy the site", "-p"),
        ("--yolo", "Deploy the site", "-p", "--model", "script/scripted"),
        ("-cp", "Deploy the site"),
        ("--print", "--output-format", "text", "Deploy the site"),
        ("-p", "--", "Deploy the site"),
    ]
    for args in orders:
        result = run_mm(*args, cwd=work)
        assert (result.returncode, result.stdout) == (0, "done\n"), (args, result.stderr)
    assert _sent(server) == ["Deploy the site"] * len(orders)


def test_a_prompt_that_names_a_command_needs_p_or_double_dash(mm_home, scripted):
    server = scripted([{"text": "ok"}] * 2)
    work = mm_home / "work"
    assert run_mm("-p", "daemon", cwd=work).stdout == "ok\n"
    assert run_mm("--", "sessions", cwd=work).stdout == "ok\n"  # stdin is no terminal: print mode
    assert _sent(server) == ["daemon", "sessions"]
    assert "mmd" in run_mm("daemon", "status", cwd=work).stdout  # without them, the command runs


def test_a_mistyped_command_is_a_usage_error_not_a_prompt(mm_home, scripted):
    server = scripted([{"text": "never"}])
    result = run_mm("sesions", "list", cwd=mm_home / "work")
    assert result.returncode == 2
    assert "Did you mean 'sessions'" in result.stderr and "mm -p sesions" in result.stderr
    assert server.requests() == []


def test_no_prompt_is_a_usage_error_that_says_what_to_type(mm_home):
    for args, piped in ((("-p",), ""), (("-p", "  "), ""), ((), "\n")):
        result = run_mm(*args, input=piped, cwd=mm_home / "work")
        assert result.returncode == 2, (args, result.stderr)
        assert 'mm -p "' in result.stderr and "no prompt" in result.stderr


def test_piped_stdin_alone_is_the_prompt(mm_home, scripted):
    server = scripted([{"text": "ok"}, {"text": "ok"}])
    work = mm_home / "work"
    assert run_mm("-p", input="what is this?\n", cwd=work).returncode == 0
    assert run_mm(input="and this?\n", cwd=work).returncode == 0  # no -p, stdin no terminal: print mode
    assert _sent(server) == ["what is this?\n", "and this?\n"]


def test_text_mode_stdout_is_the_final_answer_and_narration_goes_to_stderr(mm_home, scripted):
    work = mm_home / "work"
    scripted(
        [
            {
                "text": "Let me list the files.",
                "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}],
            },
            {"text": "There is nothing here."},
        ]
    )
    result = run_mm("-p", "what is here?", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "There is nothing here.\n"
    assert result.stderr.count("Let me list the files.") == 1


def test_a_denial_is_said_once_on_stderr(mm_home, scripted):
    scripted([{"tool_calls": [{"name": "bash", "arguments": {"command": "touch nope"}}]}])
    result = run_mm("-p", "make a file", cwd=mm_home / "work")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.count("no one to ask") == 1, result.stderr


def test_a_prompt_without_p_on_a_terminal_starts_a_chat_with_it(mm_home, scripted):
    server = scripted([{"text": "first answer"}, {"text": "second answer"}])
    dialogue = [("first answer", None), ("›", "and then?"), ("second answer", None), ("›", "/exit")]
    code, text = run_on_pty(["what is here?"], mm_home / "work", dialogue, enter=b"\r")
    assert code == 0, text
    contents = [m["content"] for m in server.requests()[1]["body"]["messages"] if m["role"] != "system"]
    assert contents == ["what is here?", "first answer", "and then?"]  # one session


# What every stand-in for mmd below starts with: it listens on the socket (argv[1]) and says "ready".
LISTENING = r"""
import os, signal, socket, sys, time
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(16)
print("ready", flush=True)
"""


@contextlib.contextmanager
def listening(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """A process standing in for mmd (``python ARGV...``), once it printed "ready"; killed at the end."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def private_socket(home: Path) -> Path:
    """The test's socket path, its folder made (private) for a stand-in to bind in."""
    sock = socket_of(home)
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return sock


# A process that stands in for a stuck mmd: named mmd (argv[1]), it listens on the socket, accepts, never
# answers, and ignores SIGTERM, as an event loop stuck in a busy loop would.
STUCK_MMD = (
    LISTENING
    + r"""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
held = []
while True:
    held.append(srv.accept()[0])
"""
)


def test_a_daemon_that_does_not_answer_is_named_and_daemon_stop_ends_it(mm_home, scripted, daemon):
    scripted([{"text": "a new daemon answers"}])
    daemon.send_signal(signal.SIGSTOP)  # stopped: it accepts (the kernel does) and says nothing
    for args in (["daemon", "status"], ["-p", "hello"]):
        result = run_mm(*args)
        assert result.returncode == 1, args
        assert (
            f"(pid {daemon.pid}) accepted the connection but did not answer within 10 s: it is stopped or "
            "stuck. `mm daemon stop` ends it" in result.stderr
        ), args
    stopped = run_mm("daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"mmd (pid {daemon.pid}) did not answer; stopped" in stopped.stdout
    assert daemon.wait(10) == 0  # SIGTERM and SIGCONT: it ended as on any SIGTERM, cleanly
    answered = run_mm("-p", "hello")
    assert answered.returncode == 0 and "a new daemon answers" in answered.stdout


def test_daemon_stop_kills_a_stuck_daemon_and_leaves_any_other_process_alone(mm_home, tmp_path):
    sock = private_socket(mm_home)
    fake = tmp_path / "mmd"
    fake.write_text(STUCK_MMD)
    with listening(str(fake), str(sock)) as stuck:
        stopped = run_mm("daemon", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert f"mmd (pid {stuck.pid}) did not answer; killed (SIGKILL)" in stopped.stdout
        assert stuck.wait(10) == -signal.SIGKILL
    # Not named mmd (under systemd socket activation: the service manager that bound the socket): untouched.
    sock.unlink()
    with listening("-c", STUCK_MMD, str(sock)) as other:
        refused = run_mm("daemon", "stop")
        assert refused.returncode == 1
        assert f"(pid {other.pid}" in refused.stderr and "is not mmd" in refused.stderr
        assert "systemctl --user restart mmd.service" in refused.stderr
        assert other.poll() is None


@needs_nvim
def test_neovim_says_so_when_the_daemon_does_not_answer(mm_home, daemon):
    daemon.send_signal(signal.SIGSTOP)
    try:
        got = nvim_request({}, mm_home / "work")
    finally:
        daemon.send_signal(signal.SIGCONT)
    assert not got["answered"]
    assert f"(pid {daemon.pid}) accepted the connection but did not answer within 10 s" in got["err"]
    assert "`mm daemon stop`" in got["err"]


# Accepts one connection, leaves what the client sent unread and closes it: the client's next read is reset
# (ECONNRESET), as when a daemon is killed in the middle of a request.
RESETTING = (
    LISTENING
    + r"""
conn = srv.accept()[0]
time.sleep(0.5)
conn.close()
"""
)


def test_a_connection_reset_by_a_dying_daemon_is_a_message_not_a_traceback(mm_home):
    with listening("-c", RESETTING, str(private_socket(mm_home))) as dying:
        result = run_mm("daemon", "status")
        assert dying.wait(10) == 0
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "mm: mmd closed the connection (Connection reset by peer) (it stopped or crashed)" in result.stderr


# Answers the handshake as mmd does, then closes the connection at the next request: a daemon that died
# between two calls of one command.
DIES_AFTER_HANDSHAKE = (
    LISTENING
    + r"""
from mmd.rpc import Splitter, decode_message, response
conn = srv.accept()[0]
splitter = Splitter()
while True:
    for frame in splitter.feed(conn.recv(65536)):
        msg = decode_message(frame)
        if msg.method != "handshake":
            conn.close()
            sys.exit(0)
        result = {"protocol": 1, "daemon_version": sys.argv[2], "pid": os.getpid(), "capabilities": []}
        conn.sendall(response(msg.msgid, None, result))
"""
)


def test_a_daemon_gone_in_the_middle_of_any_command_is_a_message_not_a_traceback(mm_home):
    sock = private_socket(mm_home)
    for args in (["mcp", "list"], ["sessions", "list"], ["tools", "list"]):
        with listening("-c", DIES_AFTER_HANDSHAKE, str(sock), __version__) as dying:
            result = run_mm(*args)
            assert dying.wait(10) == 0
        sock.unlink(missing_ok=True)
        assert result.returncode == 1, args
        assert "Traceback" not in result.stderr, args
        assert "mm: mmd closed the connection (it stopped or crashed)" in result.stderr, args


def test_a_prompt_larger_than_the_daemon_reads_says_so_and_the_daemon_goes_on(mm_home, scripted):
    # 20 MB piped into `mm -p` was refused by the daemon's splitter, which hung up: the client reported a broken
    # pipe and "see its log". It now says what is too large and what to do, before sending a byte of it.
    scripted([{"text": "still here"}])
    work = mm_home / "work"
    result = run_mm("-p", "review this", cwd=work, input="a" * 17_000_000)
    assert result.returncode == 1
    assert "the request (session.prompt) is 17,000,0" in result.stderr
    assert (
        "past the 16,777,216 mmd reads in one message; save it to a file and name the file" in result.stderr
    )
    assert "Broken pipe" not in result.stderr
    answered = run_mm("-p", "are you there?", cwd=work)
    assert answered.returncode == 0 and "still here" in answered.stdout


def test_a_daemon_that_cannot_open_its_store_is_quoted_not_a_closed_connection(mm_home, scripted):
    # The daemon opens its store before its socket exists: one that cannot (here a file that is no SQLite
    # database) exits with the reason before any client connects, and the client quotes it. Opened after the
    # bind, a client connected in between read "closed the connection", with the reason only in the log.
    scripted([{"text": "fine"}])
    store = mm_home / "state" / "mm" / "mm.db"
    store.parent.mkdir(mode=0o700)
    store.write_bytes(b"not a database, " * 512)
    for _ in range(3):
        refused = run_mm("-p", "hello", cwd=mm_home / "work")
        assert refused.returncode == 1
        told = f"mmd failed to start (exit code 1): cannot use the store {store}: file is not a database"
        assert told in refused.stderr, refused.stderr
        assert "closed the connection" not in refused.stderr
        assert not daemon_pids(mm_home)
    store.unlink()
    ok = run_mm("-p", "hello", cwd=mm_home / "work")
    assert ok.returncode == 0, ok.stderr
    assert "fine" in ok.stdout
