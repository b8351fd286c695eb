"""A path a request names that cannot be read (mmd.turn.plan.path_errors): ``bad_path`` naming the path and the
reason, from every method that reads it, never an internal error with a traceback."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mmd.api import eval as eval_api
from mmd.api import tools as tools_api
from mmd.config import AgentFile
from mmd.config.trust import Trust, everything, named_file
from mmd.rpc import RPCError
from mmd.rpc.methods import EvalLoad, SkillsList, ToolsCheck
from mmd.turn import plan

# One name of a path past NAME_MAX (255 bytes): stat and open fail with ENAMETOOLONG.
LONG = "x" * 300


def refusal(call: Callable[[], Any]) -> RPCError:
    with pytest.raises(RPCError) as refused:
        call()
    return refused.value


async def async_refusal(call: Callable[[], Awaitable[Any]]) -> RPCError:
    with pytest.raises(RPCError) as refused:
        await call()
    return refused.value


def assert_names_too_long(err: RPCError, path: str) -> None:
    assert err.code == "bad_path", err.message
    assert f"cannot read {path}" in err.message and "File name too long" in err.message
    assert "a name in a path is at most 255 bytes" in err.message


class _Daemon:
    """What the methods that read a project ask of the daemon before they read: its trust."""

    def project_trust(self, conn: object, cwd: Path, named: str | None) -> Trust:
        return Trust({}, named=named_file(cwd, named))


@pytest.mark.parametrize(
    ("method", "params", "path"),
    [
        ("tools.check", lambda tmp: ToolsCheck(agent=f"/{LONG}"), lambda tmp: f"/{LONG}"),
        ("skills.list", lambda tmp: SkillsList(cwd=str(tmp), agent=LONG), lambda tmp: f"{tmp}/{LONG}"),
        ("skills.list", lambda tmp: SkillsList(cwd=f"{tmp}/{LONG}"), lambda tmp: f"{tmp}/{LONG}/mm.yaml"),
        ("eval.load", lambda tmp: EvalLoad(path=f"{tmp}/{LONG}"), lambda tmp: f"{tmp}/{LONG}"),
    ],
    ids=["tools.check agent", "skills.list agent", "skills.list cwd", "eval.load path"],
)
async def test_a_name_too_long_is_bad_path_from_the_methods_that_read_it(
    tmp_path: Path, method: str, params: Any, path: Any
) -> None:
    handler = {
        "tools.check": tools_api.check,
        "skills.list": tools_api.skills_list,
        "eval.load": eval_api.load,
    }
    err = await async_refusal(lambda: handler[method](_Daemon(), None, params(tmp_path)))  # type: ignore[operator]
    assert_names_too_long(err, path(tmp_path))


def test_a_prompt_or_a_listing_in_a_folder_whose_name_is_too_long_is_bad_path(tmp_path: Path) -> None:
    # plan.load is what session.prompt (through resolve), tools.list, mcp.list and mcp.test read first.
    cwd = tmp_path / LONG
    assert_names_too_long(
        refusal(lambda: plan.load(cwd, None, tmp_path / "config.yaml", everything())), f"{cwd}/mm.yaml"
    )
    assert_names_too_long(
        refusal(lambda: plan.load(tmp_path, LONG, tmp_path / "config.yaml", everything())), str(cwd)
    )
    err = refusal(
        lambda: plan.resolve(
            cwd, agent=None, model=None, yolo=False, config_path=tmp_path / "config.yaml", trust=everything()
        )
    )
    assert_names_too_long(err, f"{cwd}/mm.yaml")
    # The skills beneath a folder are read with the same answer (a turn's tools, tools.list, mcp.test).
    assert_names_too_long(refusal(lambda: plan.build_tools(AgentFile(), cwd)), str(cwd / ".git"))


def test_a_loop_of_links_is_named_with_what_to_do(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)

    def read() -> None:
        with plan.path_errors():
            os.stat(loop)

    err = refusal(read)
    assert err.code == "bad_path"
    assert err.message.startswith(f"cannot read {loop}: Too many levels of symbolic links — ")
    assert "fix or remove the link" in err.message


# -- files a repository ships, reached through symbolic links ------------------------------------------

SECRET = "root:$6$SECRET-HASH:20228:0:99999:7:::\n"


@pytest.mark.parametrize(
    ("shipped", "what"),
    [
        (".mcp.json", "a project's .mcp.json"),
        (".claude/settings.json", "a project's Claude Code settings"),
        (".claude/settings.local.json", "a project's Claude Code settings"),
    ],
)
def test_a_file_the_project_ships_linked_out_of_it_is_refused_naming_the_link_and_quoting_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: str, what: str
) -> None:
    # A cloned repository's .mcp.json or .claude/settings.json linked to a file of yours was read by any
    # prompt there (or tools.list, mcp.list), and its first line quoted back in the config error.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    config = tmp_path / "config" / "mm" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "default_model: a/b\nproviders: {a: {kind: openai, base_url: 'http://127.0.0.1:1/v1'}}\n"
    )
    cwd = tmp_path / "repo"
    (cwd / ".git").mkdir(parents=True)
    (cwd / "mm.yaml").write_text("hooks: {import: claude}\n")
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text(SECRET)
    link = cwd / shipped
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(secret)

    def prompt() -> plan.Plan:
        return plan.resolve(cwd, agent=None, model=None, yolo=False, config_path=config, trust=everything())

    err = refusal(prompt)
    assert err.code == "config_error"
    assert (
        f"{link}: a symbolic link to {secret}, outside the project ({cwd}) and your config folder"
        in err.message
    )
    assert f"mm reads {what} through a link only when it leads inside them" in err.message
    assert "SECRET" not in err.message and "99999" not in err.message
    if shipped == ".mcp.json":  # mcp.list and tools.list read it too, before any turn
        assert "a symbolic link to" in refusal(lambda: plan.load(cwd, None, config, everything())).message
    # A link that stays inside the project is followed; so is a Claude settings file linked into ~/.claude.
    inside = cwd / "shared" / "file.json"
    inside.parent.mkdir()
    inside.write_text('{"mcpServers": {}}' if shipped == ".mcp.json" else '{"hooks": {}}')
    link.unlink()
    link.symlink_to(inside)
    assert prompt().agent_path == str(cwd / "mm.yaml")
    if shipped != ".mcp.json":
        claude = tmp_path / "home" / ".claude" / "project-settings.json"
        claude.parent.mkdir()
        claude.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}')
        link.unlink()
        link.symlink_to(claude)
        assert [spec.stop[0].hooks[0].command for spec, _ in prompt().claude_hooks] == ["true"]


def test_the_users_own_claude_settings_may_be_a_link_to_anywhere(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    dotfiles = tmp_path / "dotfiles" / "claude.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine"}]}]}}')
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    (tmp_path / "home" / ".claude" / "settings.json").symlink_to(dotfiles)
    config = tmp_path / "config" / "mm" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "default_model: a/b\nproviders: {a: {kind: openai, base_url: 'http://127.0.0.1:1/v1'}}\n"
        "hooks: {import: claude}\n"
    )
    cwd = tmp_path / "work"
    cwd.mkdir()
    found = plan.resolve(
        cwd, agent=None, model=None, yolo=False, config_path=config, trust=Trust({})
    ).claude_hooks
    assert [spec.stop[0].hooks[0].command for spec, _ in found] == ["mine"]
