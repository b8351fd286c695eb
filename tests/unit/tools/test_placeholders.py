"""Option injection through adjacent placeholders: the leading-dash rule holds for the argument as built.

With ``command: ["./rec", "{{d}}{{e}}"]`` and ``d = ""``, e's ``-rf`` used to begin the argument
(the rule looked at the first placeholder only). Here, against the real code:

- hypothesis over splits of an entry into literals and placeholders, and over values (many
  starting with "-", many empty): an argument starts with "-" only when the template's own
  literal begins it, or an exempt value (``allow_dash``, a number) begins it alone; every other
  such argument is refused, naming a parameter of the entry, and nothing else is refused;
- the same through a real child process: what the program receives;
- the load-time check (``mm tools check``) accepts every split of plain string placeholders and
  refuses exactly the entries where an ``allow_dash`` value would have another value joined to
  its option — for each refusal, the values that show the entry cannot work;
- end to end (tests/e2e/adversarial/test_placeholders.py), a real daemon and the scripted model
  send the five values of the finding; the program records what it received, and the model reads
  which parameter to change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mmd import contract
from mmd.config import ConfigError, load_agent_file
from mmd.config.declared import PLACEHOLDER, DeclaredToolSpec
from mmd.tools.base import Limits, ToolContext, ToolError
from mmd.tools.declared import DeclaredTool, build_argv, parameters_schema

from ...budget import examples

# The values of the finding: each reached the program as an option (5/5).
FINDING = ["-rf", "--force", "--", "-", "-x=1"]
NAMES = ("a", "b", "c")
# Literal pieces of an entry: empty, plain text, option-like text after a placeholder.
LITERALS = ["x", "=", ".txt", "/", "-", "--", "-x", "--opt=", " "]
# NUL is refused on its own (argv cannot carry it): left out here.
no_nul = st.characters(codec="utf-8", exclude_characters="\0")
dash_values = st.text(no_nul, max_size=6).map(lambda s: "-" + s)
values = st.one_of(
    st.just(""),
    st.sampled_from(FINDING),
    dash_values,
    st.text(no_nul, max_size=8),
)
pieces = st.lists(
    st.one_of(st.sampled_from([f"{{{{{n}}}}}" for n in NAMES]), st.sampled_from(LITERALS)),
    min_size=1,
    max_size=6,
).filter(lambda ps: any(PLACEHOLDER.fullmatch(p) for p in ps))


def tool_spec(
    entry: str, params: dict[str, dict[str, Any]], program: list[str] | None = None
) -> DeclaredToolSpec:
    return msgspec.convert(
        {
            "name": "rec",
            "description": "Record the arguments.",
            "command": [*(program or ["./rec"]), entry],
            "parameters": params,
            "effects": "read",
        },
        DeclaredToolSpec,
    )


def used(entry: str) -> list[str]:
    return list(dict.fromkeys(PLACEHOLDER.findall(entry)))


def built_naively(entry: str, args: dict[str, Any]) -> str:
    """The argument as plain text substitution would build it (what the old code passed on)."""
    return PLACEHOLDER.sub(lambda m: str(args[m[1]]), entry)


# --- the rule, on the argument as finally built ---------------------------------------------


@settings(max_examples=examples(2500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=pieces, data=st.data())
def test_a_value_never_makes_an_argument_start_with_a_dash(parts: list[str], data: st.DataObject) -> None:
    entry = "".join(parts)
    assume(not entry.startswith("-"))  # a literal "-" the author wrote first is their own option
    params = {n: {"required": True} for n in used(entry)}
    spec = tool_spec(entry, params)
    args = {n: data.draw(values, label=n) for n in params}
    naive = built_naively(entry, args)
    try:
        argv = build_argv(spec.command, spec.parameters, contract.validate(parameters_schema(spec), args))
    except ToolError as err:
        # Refused only when the argument would start with "-"; the model is told which parameter.
        assert naive.startswith("-"), (entry, args, err.reason)
        assert err.code == "leading_dash" and err.cls == "fix_and_retry"
        assert err.field in params and err.field in err.reason and "option" in err.reason
        assert err.fix and err.field in err.fix
        return
    assert argv == ["./rec", naive]
    assert not naive.startswith("-"), (entry, args)


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=pieces, data=st.data())
def test_an_exempt_value_may_begin_an_argument_only_alone(parts: list[str], data: st.DataObject) -> None:
    """allow_dash and numbers may begin an argument, but no other value may join their option."""
    entry = "".join(parts)
    assume(not entry.startswith("-"))
    names = used(entry)
    kinds = {n: data.draw(st.sampled_from(["string", "dash", "integer"]), label=f"kind {n}") for n in names}
    params: dict[str, dict[str, Any]] = {
        n: {"required": True, "type": "integer"}
        if k == "integer"
        else {"required": True, "allow_dash": k == "dash"}
        for n, k in kinds.items()
    }
    spec = tool_spec(entry, params)
    args = {n: data.draw(st.integers(-50, 50) if kinds[n] == "integer" else values, label=n) for n in names}
    try:
        argv = build_argv(spec.command, spec.parameters, contract.validate(parameters_schema(spec), args))
    except ToolError as err:
        assert err.code == "leading_dash" and err.field in params
        assert built_naively(entry, args).startswith("-")
        return
    arg = argv[1]
    if arg.startswith("-"):
        # Then one exempt value begins it, and what follows is the template's literal text only.
        starter = next(n for n in PLACEHOLDER.findall(entry) if str(args[n]))
        assert kinds[starter] in ("dash", "integer")
        rest = entry.split(f"{{{{{starter}}}}}", 1)[1]
        assert all(str(args[n]) == "" or n == starter for n in PLACEHOLDER.findall(rest))


@pytest.mark.parametrize("value", FINDING)
def test_the_finding_is_refused_naming_the_parameter(value: str) -> None:
    spec = tool_spec("{{d}}{{e}}", {"d": {"required": True}, "e": {"required": True}})
    with pytest.raises(ToolError) as info:
        build_argv(spec.command, spec.parameters, {"d": "", "e": value})
    err = info.value
    assert err.code == "leading_dash" and err.field == "e"
    assert "d empty before it" in err.reason and "e without the leading '-'" in err.fix
    # The same value after a non-empty d is harmless, and passes.
    assert build_argv(spec.command, spec.parameters, {"d": "x", "e": value}) == ["./rec", "x" + value]


# --- what a real program receives ----------------------------------------------------------------

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
PROGRAM = [sys.executable, "-I", "-S", "-c", ECHO_ARGV]


def test_a_real_program_never_receives_an_argument_starting_with_a_dash(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("rec")
    ctx = ToolContext(
        session_id="s", call_id="c", cwd=tmp, session_dir=tmp / "session", limits=Limits(timeout=60)
    )

    @settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(parts=pieces, data=st.data())
    def check(parts: list[str], data: st.DataObject) -> None:
        entry = "".join(parts)
        assume(not entry.startswith("-"))
        params = {n: {"required": True} for n in used(entry)}
        tool = DeclaredTool(tool_spec(entry, params, PROGRAM), tmp)
        args = contract.validate(tool.parameters, {n: data.draw(values, label=n) for n in params})
        try:
            result = trio.run(tool.run, args, ctx)
        except ToolError as err:
            assert err.code == "leading_dash"
            return
        assert result.ok, result.content
        [received] = json.loads(result.content.splitlines()[0])
        assert not received.startswith("-")

    check()


# --- the load-time check ------------------------------------------------------------------------


def load(tmp: Path, entry: str, params: dict[str, dict[str, Any]]) -> ConfigError | None:
    path = tmp / "mm.yaml"
    tool = {"name": "rec", "description": "Record.", "command": ["./rec", entry], "parameters": params}
    path.write_text(yaml.safe_dump({"tools": [tool]}, sort_keys=False))
    try:
        load_agent_file(path)
    except ConfigError as err:
        return err
    return None


def test_the_check_accepts_every_split_of_plain_placeholders(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("check")

    @settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(parts=pieces)
    def check(parts: list[str]) -> None:
        entry = "".join(parts)
        assert load(tmp, entry, {n: {"required": True} for n in used(entry)}) is None  # the runtime guards it

    check()


def test_the_check_refuses_exactly_what_cannot_work(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("check")

    @settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(parts=pieces, data=st.data())
    def check(parts: list[str], data: st.DataObject) -> None:
        entry = "".join(parts)
        names = used(entry)
        dash = data.draw(st.sets(st.sampled_from(names), min_size=1), label="allow_dash")
        params = {n: {"required": True, "allow_dash": n in dash} for n in names}
        err = load(tmp, entry, params)
        spec = tool_spec(entry, params)
        if err is None:
            # Accepted: an allow_dash value with every value after it given is never refused for
            # them (only an empty value before it that leaves a literal "-" first may be).
            for starter in dash:
                before = set(PLACEHOLDER.findall(entry[: entry.index(f"{{{{{starter}}}}}")]))
                args = {n: "" if n in before else "rf" for n in names} | {starter: "-v"}
                try:
                    build_argv(spec.command, spec.parameters, args)
                except ToolError as refused:
                    assert refused.field in before, (entry, refused.reason)
            return
        # Refused: its line and field, and values that show it: the allow_dash value begins the
        # argument, the value after it joins the option, and the runtime refuses the call.
        assert err.line is not None and err.field == "tools[0].command[1]"
        assert "allow_dash" in err.problem
        starter, follower = PLACEHOLDER.findall(err.problem)[:2]
        args = {n: "" for n in names} | {starter: "-v", follower: "rf"}
        with pytest.raises(ToolError) as info:
            build_argv(spec.command, spec.parameters, args)
        assert info.value.code == "leading_dash"

    check()


# --- end to end -------------------------------------------------------------------------------
