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
    err = await async_refusal(lambda: handler[method](None, None, params(tmp_path)))  # type: ignore[operator]
    assert_names_too_long(err, path(tmp_path))


def test_a_prompt_or_a_listing_in_a_folder_whose_name_is_too_long_is_bad_path(tmp_path: Path) -> None:
    # plan.load is what session.prompt (through resolve), tools.list, mcp.list and mcp.test read first.
    cwd = tmp_path / LONG
    assert_names_too_long(refusal(lambda: plan.load(cwd, None, tmp_path / "config.yaml")), f"{cwd}/mm.yaml")
    assert_names_too_long(refusal(lambda: plan.load(tmp_path, LONG, tmp_path / "config.yaml")), str(cwd))
    err = refusal(
        lambda: plan.resolve(cwd, agent=None, model=None, yolo=False, config_path=tmp_path / "config.yaml")
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
