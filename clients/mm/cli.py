"""``mm``: the command-line client of the mm daemon.

Thin by design: it connects to mmd (starting it when none runs), sends the
prompt, and renders the events the daemon streams back. It must not import
trio, httpx or the daemon's modules, so ``mm`` starts fast.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from mmd import __version__
from mmd.rpc import RPCError

from .connection import Client, DaemonError
from .render import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, View

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(message: str, code: int = EXIT_ERROR) -> None:
    click.echo(f"mm: {message}", err=True)
    sys.exit(code)


def _connect(**kwargs: Any) -> Client:
    try:
        return Client.connect(**kwargs)
    except DaemonError as exc:
        _fail(str(exc))
        raise  # unreachable


@click.group(invoke_without_command=True, context_settings=CONTEXT)
@click.option(
    "-p",
    "--print",
    "prompt",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="PROMPT",
    help="Run PROMPT, print the answer and exit. Text piped on stdin is added to the prompt.",
)
@click.option(
    "-c", "--continue", "continue_", is_flag=True, help="Continue the newest session of this directory."
)
@click.option("-r", "--resume", metavar="ID", help="Continue the session ID (a unique prefix is enough).")
@click.option(
    "--agent", type=click.Path(dir_okay=False), help="Agent file (default: ./mm.yaml, then .mm/agent.yaml)."
)
@click.option("-m", "--model", help="Model: PROVIDER/MODEL or an alias from config.yaml.")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "stream-json"]),
    default="text",
    show_default=True,
    help="text: the answer; json: one object at the end; stream-json: every event as a JSON line.",
)
@click.option("--yolo", is_flag=True, help="Run write tools without asking (destructive tools still ask).")
@click.version_option(__version__, "-V", "--version", prog_name="mm")
@click.pass_context
def main(ctx: click.Context, prompt: str | None, continue_: bool, resume: str | None, **opts: Any) -> None:
    """mm runs your commands through a language model, correctly, safely and fast.

    \b
    mm -p "what changed in this repo?"    answer once and exit
    mm                                     chat in this terminal
    mm --continue -p "and now?"            continue the newest session here
    """
    if ctx.invoked_subcommand is not None:
        return
    opts.update(continue_=continue_, resume=resume)
    if prompt is None and sys.stdin.isatty():
        sys.exit(_chat(**opts))
    piped = "" if sys.stdin.isatty() else sys.stdin.read()
    text = "\n\n".join(part for part in (prompt or "", piped) if part.strip())
    if not text.strip():
        raise click.UsageError('no prompt: give one with -p "..." or on stdin')
    sys.exit(run_prompt(text, **opts))


def _prompt_params(text: str, opts: dict[str, Any], session_id: str | None) -> dict[str, Any]:
    agent = opts.get("agent")
    params: dict[str, Any] = {
        "prompt": text,
        "cwd": os.getcwd(),
        "yolo": bool(opts.get("yolo")),
        "interactive": sys.stdin.isatty(),
    }
    if agent:
        params["agent"] = os.path.abspath(agent)
    if opts.get("model"):
        params["model"] = opts["model"]
    if session_id:
        params["session_id"] = session_id
    elif opts.get("resume"):
        params["session_id"] = opts["resume"]
    elif opts.get("continue_"):
        params["continue_last"] = True
    return params


def run_prompt(text: str, *, output_format: str = "text", session_id: str | None = None, **opts: Any) -> int:
    """Run one turn; returns the exit code."""
    view = View(output_format)
    client = _connect()
    try:
        started = client.call("session.prompt", _prompt_params(text, opts, session_id))
    except RPCError as exc:
        view.error(exc.message)
        return EXIT_ERROR
    code, _ = follow(client, started["session_id"], started["after_seq"], view)
    client.close()
    return code


def follow(client: Client, session_id: str, after_seq: int, view: View) -> tuple[int, str]:
    """Render the session's events until its turn ends; Ctrl-C cancels the turn."""
    interrupted = False
    while True:
        try:
            ended = _follow(client, session_id, after_seq, view)
            break
        except KeyboardInterrupt:
            if interrupted:  # a second Ctrl-C: leave now, the daemon finishes the cancel
                view.note("interrupted")
                return EXIT_INTERRUPTED, session_id
            interrupted = True
            view.note("cancelling the turn… (Ctrl-C again to quit now)")
            client.send("session.cancel", {"session_id": session_id})
        except DaemonError as exc:
            view.error(str(exc))
            return EXIT_ERROR, session_id
    code = view.finish(session_id, ended)
    return (EXIT_INTERRUPTED if interrupted else code), session_id


def _follow(client: Client, session_id: str, after_seq: int, view: View) -> dict[str, Any]:
    while True:
        method, ev = client.next_notification()
        if method != "event" or ev["session_id"] != session_id or ev["seq"] <= after_seq:
            continue
        view.event(ev)
        if ev["kind"] == "consent_needed":
            _answer_consent(client, session_id, ev["data"], view)
        elif ev["kind"] == "turn_ended":
            return ev["data"]


def _answer_consent(client: Client, session_id: str, ask: dict[str, Any], view: View) -> None:
    if not sys.stdin.isatty():
        return  # another attached client may answer; the daemon denies when none can
    bash = ask.get("command") is not None
    always = "always this command" if bash else f"always {ask['tool']}"
    view.note(f"  {ask['tool']} ({ask['tier']}) wants to run: {ask['echo']}")
    choices = f"[y] once  [a] {always}" + ("  [p] a command prefix" if bash else "") + "  [n] deny"
    answer: dict[str, Any] = {"session_id": session_id, "request_id": ask["request_id"]}
    while True:
        reply = click.prompt(f"  allow? {choices}", default="n", show_default=False, err=True).strip().lower()
        if reply in ("y", "yes"):
            answer["decision"] = "allow_once"
        elif reply in ("a", "always"):
            answer["decision"] = "allow_always"
        elif reply == "p" and bash:
            answer["decision"] = "allow_always"
            answer["rule"] = click.prompt("  prefix to allow (e.g. git status)", err=True).strip()
        elif reply in ("n", "no"):
            answer["decision"] = "deny"
            answer["reason"] = click.prompt(
                "  reason for the model (optional)", default="", show_default=False, err=True
            )
        else:
            continue
        break
    try:
        client.call("consent.answer", answer)
    except RPCError as exc:
        view.error(exc.message)


def _chat(**opts: Any) -> int:
    import readline  # noqa: F401 - line editing and history for input()

    view_format = opts.pop("output_format", "text")
    session_id = opts.pop("resume", None)
    click.echo(f"mm {__version__} — Ctrl-C cancels a turn, Ctrl-D or /exit quits.", err=True)
    code = EXIT_OK
    while True:
        try:
            line = input("› ")
        except (EOFError, KeyboardInterrupt):
            click.echo(err=True)
            return code
        if line.strip() in ("/exit", "/quit"):
            return code
        if not line.strip():
            continue
        code = run_prompt(line, output_format=view_format, session_id=session_id, **opts)
        if session_id is None:
            session_id = _newest_session()
        opts["continue_"] = False


def _newest_session() -> str | None:
    client = _connect()
    rows = client.call("session.list", {"limit": 1, "cwd": os.getcwd()})["sessions"]
    client.close()
    return rows[0]["id"] if rows else None


@main.command()
@click.option("--agent", type=click.Path(dir_okay=False), help="Agent file.")
@click.option("-m", "--model", help="Model: PROVIDER/MODEL or an alias.")
@click.option("-r", "--resume", metavar="ID", help="Continue the session ID.")
@click.option("--yolo", is_flag=True, help="Run write tools without asking.")
def chat(**opts: Any) -> None:
    """Chat with the model in this terminal."""
    sys.exit(_chat(continue_=False, **opts))


# -- daemon ---------------------------------------------------------------------


@main.group()
def daemon() -> None:
    """Start, stop or inspect the mmd daemon."""


@daemon.command("start")
def daemon_start() -> None:
    """Start the daemon unless one is running, and print its status."""
    client = _connect()
    _print_status(client.call("daemon.status"))


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon gracefully: running turns are cancelled, children reaped."""
    try:
        client = Client.connect(autostart=False, check_version=False)
    except DaemonError:
        click.echo("mmd is not running")
        return
    result = client.call("daemon.stop")
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            client.next_notification()
    except DaemonError:
        pass  # the daemon closed our connection: it is stopping
    client.close()
    while time.monotonic() < deadline and client.path.exists():
        time.sleep(0.02)
    click.echo(f"mmd (pid {result['pid']}) stopped")


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def daemon_status(as_json: bool) -> None:
    """Show whether the daemon runs, its pid, socket, store and log."""
    try:
        client = Client.connect(autostart=False, check_version=False)
    except DaemonError as exc:
        _fail(str(exc))
    status = client.call("daemon.status")
    if as_json:
        click.echo(json.dumps(status, indent=2))
    else:
        _print_status(status)


def _print_status(status: dict[str, Any]) -> None:
    click.echo(f"mmd {status['version']} running, pid {status['pid']}, up {status['uptime']:.0f} s")
    for key in ("socket", "store", "log", "clients", "sessions_loaded", "turns_running"):
        click.echo(f"  {key.replace('_', ' ')}: {status[key]}")


# -- sessions -------------------------------------------------------------------


@main.group()
def sessions() -> None:
    """List and show stored sessions."""


@sessions.command("list")
@click.option("-n", "--limit", default=20, show_default=True, help="How many sessions.")
@click.option("--here", is_flag=True, help="Only sessions of this directory.")
@click.option("--json", "as_json", is_flag=True)
def sessions_list(limit: int, here: bool, as_json: bool) -> None:
    """List sessions, newest first."""
    client = _connect()
    params: dict[str, Any] = {"limit": limit}
    if here:
        params["cwd"] = os.getcwd()
    rows = client.call("session.list", params)["sessions"]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo('no sessions yet: start one with mm -p "..."')
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
        state = " (running)" if row["running"] else ""
        click.echo(
            f"{row['id']}  {when}  {row['title'] or '(untitled)'}{state}\n    {row['cwd']}  {row['model']}"
        )


@sessions.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Messages and events as JSON.")
def sessions_show(session_id: str, as_json: bool) -> None:
    """Show the conversation of SESSION_ID (a unique prefix is enough)."""
    client = _connect()
    try:
        shown = client.call("session.show", {"session_id": session_id, "events": as_json})
    except RPCError as exc:
        _fail(exc.message)
    if as_json:
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    row = shown["session"]
    click.echo(f"session {row['id']} in {row['cwd']} ({row['model']})")
    for msg in shown["messages"]:
        _print_message(msg)


def _print_message(msg: dict[str, Any]) -> None:
    role = msg["role"]
    if role == "tool":
        click.echo(click.style(f"  [{msg.get('name')} result] ", dim=True) + msg.get("content", "")[:2000])
        return
    if msg.get("content"):
        click.echo(f"{role}: {msg['content']}")
    for call in msg.get("tool_calls", []):
        click.echo(click.style(f"  → {call['name']}({call['arguments']})", dim=True))


# -- consent --------------------------------------------------------------------


@main.group()
def consent() -> None:
    """List and revoke remembered consent ("always allow") rules."""


@consent.command("list")
@click.option("--here", is_flag=True, help="Only rules that apply to this directory.")
@click.option("--json", "as_json", is_flag=True)
def consent_list(here: bool, as_json: bool) -> None:
    """List the rules of the consent ledger."""
    client = _connect()
    rules = client.call("consent.list", {"cwd": os.getcwd()} if here else {})["rules"]
    if as_json:
        click.echo(json.dumps(rules, indent=2))
        return
    if not rules:
        click.echo("no consent rules: answer [a] always to a consent ask to add one")
    for r in rules:
        what = r["tool"] if r["kind"] == "tool" else f"{r['tool']} {r['kind']}: {r['rule']}"
        where = r["scope"] + (f" {r['scope_key']}" if r["scope_key"] else "")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
        click.echo(f"{r['id']:>4}  allow {what}  [{where}]  {when}  by {r['origin']}")


@consent.command("revoke")
@click.argument("rule_id", type=int)
def consent_revoke(rule_id: int) -> None:
    """Revoke rule RULE_ID: the next such call asks again."""
    client = _connect()
    try:
        client.call("consent.revoke", {"id": rule_id})
    except RPCError as exc:
        _fail(exc.message)
    click.echo(f"revoked rule {rule_id}")


if __name__ == "__main__":
    main()
