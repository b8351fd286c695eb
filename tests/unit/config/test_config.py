"""Agent file and user config: YAML to Structs, and errors with file:line: field."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec
import pytest

import mmd.config
from mmd.config import (
    AgentFile,
    ConfigError,
    DaemonConfig,
    UserConfig,
    find_agent_file,
    load_agent_file,
    load_user_config,
    loader,
    resolve_model,
)
from mmd.config.hooks import claude_settings_hooks
from mmd.config.loader import describe, dotted, parse
from mmd.config.mcp_json import read_servers
from mmd.tools.skills import load_skills


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def agent_error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path / "mm.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_agent_file(path)
    return info.value


def user_error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path / "config.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_user_config(path)
    return info.value


def test_public_surface():
    for name in mmd.config.__all__:
        assert hasattr(mmd.config, name)


# -- error messages ---------------------------------------------------------

AGENT_ERRORS = [
    # yaml, line, field, message after "mm.yaml:"
    (
        "pass_env:\n  - GITHUB_TOKEN\n  - ${OPENAI_API_KEY}\n",
        3,
        "pass_env[1]",
        "3: pass_env[1]: expected the name of an environment variable, like GITHUB_TOKEN, "
        'found a string ("${OPENAI_API_KEY}")',
    ),
    (
        "pass_env: GITHUB_TOKEN\n",
        1,
        "pass_env",
        None,
    ),
    (
        "system: hi\nyolo: true\nmodel: 3\n",
        3,
        "model",
        '3: model: expected a string like "provider/model", found an integer (3)',
    ),
    (
        "yolo: false\nmodle: x\n",
        2,
        "modle",
        "2: modle: unknown key; expected one of builtins, hooks, loop, max_steps, mcp, model, pass_env, phases, sandbox, schema, skills, system, temperature, tool_examples, tools, yolo"
        ' — did you mean "model"?',
    ),
    (
        "zzz: 1\n",
        1,
        "zzz",
        "1: zzz: unknown key; expected one of builtins, hooks, loop, max_steps, mcp, model, pass_env, phases, sandbox, schema, skills, system, temperature, tool_examples, tools, yolo"
        " — remove it, or check its spelling",
    ),
    ("yolo: yes please\n", 1, "yolo", '1: yolo: expected true or false, found a string ("yes please")'),
    ("yolo: 1\n", 1, "yolo", "1: yolo: expected true or false, found an integer (1)"),
    ("max_steps: 0\n", 1, "max_steps", "1: max_steps: expected an integer, at least 1, found an integer (0)"),
    (
        "max_steps: 2.5\n",
        1,
        "max_steps",
        "1: max_steps: expected an integer, at least 1, found a number (2.5)",
    ),
    (
        "model: m\nbuiltins:\n  - bash\n  - grpe\n",
        4,
        "builtins[1]",
        '4: builtins[1]: expected one of "bash", "read_file", "write_file", "edit_file", "list_files", "grep",'
        ' "read_skill", found a string ("grpe") — did you mean "grep"?',
    ),
    (
        "builtins: bash\n",
        1,
        "builtins",
        '1: builtins: expected a list of built-in tool names, like [bash, read_file], found a string ("bash")'
        " — write [bash] for a list of one",
    ),
    (
        "skills:\n  - ./a\n  - 7\n",
        3,
        "skills[1]",
        "3: skills[1]: expected a path to a skills folder, found an integer (7)",
    ),
    ("model: a\nmodel: b\n", 2, "model", "2: model: duplicate key (first on line 1); keep one"),
    (
        "- model: x\n",
        1,
        "",
        "1: expected a map with the keys builtins, hooks, loop, max_steps, mcp, model, pass_env, phases, sandbox, schema, skills, system, temperature, tool_examples, tools, yolo, found a list"
        " — write one `key: value` per line",
    ),
    ("just words\n", 1, "", None),
    (
        "model: x\nbuiltins: [bash, grep\n",
        3,
        "",
        "3: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)"
        " — it started on line 2; check the brackets, quotes and indentation there",
    ),
    ("model: x\nskills:\n\t- a\n", 3, "", None),
    ("model: a: b\n", 1, "", None),
    ("model: x\n---\nyolo: true\n", 2, "", None),
    ("path: /etc\n", 1, "path", None),  # set by the loader, never by the file
]


@pytest.mark.parametrize(("text", "line", "field", "message"), AGENT_ERRORS)
def test_agent_file_errors(tmp_path, text, line, field, message):
    err = agent_error(tmp_path, text)
    assert (err.file, err.line, err.field) == (str(tmp_path / "mm.yaml"), line, field)
    assert str(err).startswith(f"{tmp_path / 'mm.yaml'}:{line}: ")
    if message is not None:
        assert str(err) == f"{tmp_path / 'mm.yaml'}:{message}"


def test_control_character(tmp_path):
    err = agent_error(tmp_path, "model: x\nsystem: bell \x07\n")
    assert (err.line, err.problem) == (2, "a control character ('\\x07') YAML does not allow")


def test_tab_indentation_hint(tmp_path):
    assert "indent with spaces" in str(agent_error(tmp_path, "model: x\nskills:\n\t- a\n"))


def test_several_documents_hint(tmp_path):
    assert "remove the `---` line" in str(agent_error(tmp_path, "model: x\n---\nyolo: true\n"))


USER_ERRORS = [
    (
        "providers:\n  local:\n    kind: openai\n    base_url: http://x\n    timeout: soon\n",
        5,
        "providers.local.timeout",
        '5: providers.local.timeout: expected a number, more than 0, found a string ("soon")',
    ),
    (
        "providers:\n  local:\n    kind: opnai\n    base_url: http://x\n",
        3,
        "providers.local.kind",
        '3: providers.local.kind: expected one of "openai", "anthropic", found a string ("opnai")'
        ' — did you mean "openai"?',
    ),
    (
        "providers:\n  local:\n    kind: openai\n    base_ur: http://x\n",
        4,
        "providers.local.base_ur",
        "4: providers.local.base_ur: unknown key; expected one of api_key_env, base_url, constrain_calls, context_window,"
        ' headers, kind, max_retries, max_tokens, recover_tool_calls, timeout — did you mean "base_url"?',
    ),
    (
        "providers:\n  local:\n    kind: openai\n",
        2,
        "providers.local.base_url",
        '2: providers.local.base_url: missing; expected a URL like "http://127.0.0.1:8080/v1"'
        " — add `base_url:` under providers.local",
    ),
    (
        "providers:\n  my.host:\n    kind: openai\n    base_url: 5\n",
        4,
        'providers["my.host"].base_url',
        None,
    ),
    (
        "providers:\n  local:\n    kind: openai\n    base_url: http://x\n    headers:\n      X-Team: 7\n",
        6,
        "providers.local.headers.X-Team",
        "6: providers.local.headers.X-Team: expected a string, found an integer (7)",
    ),
    ("providers: [local]\n", 1, "providers", "1: providers: expected a map, found a list"),
    (
        "daemon:\n  max_steps: 10\n  grace: -1\n",
        3,
        "daemon.grace",
        "3: daemon.grace: expected a number, at least 0, found an integer (-1)",
    ),
    (
        "providers:\n  local: {kind: openai, base_url: 'http://x'}\nmodels:\n  fast:\n    provider: lcal\n    model: m\n",
        5,
        "models.fast.provider",
        '5: models.fast.provider: unknown provider "lcal"; expected a provider (one of local)'
        ' — did you mean "local"?',
    ),
    (
        "providers:\n  local: {kind: openai, base_url: 'http://x'}\ndefault_model: nope/m\n",
        3,
        "default_model",
        None,
    ),
    (
        "daemon: {}\nsandbox: wrkspace\n",
        2,
        "sandbox",
        '2: sandbox: expected "workspace", "read-only" or "off" (or a map with mode:, writable:, network:), '
        'found a string ("wrkspace") — did you mean "workspace"?',
    ),
    ("sandbox:\n  writable: ~/.cache/uv\n", 2, "sandbox.writable", None),
]


@pytest.mark.parametrize(("text", "line", "field", "message"), USER_ERRORS)
def test_user_config_errors(tmp_path, text, line, field, message):
    err = user_error(tmp_path, text)
    assert (err.line, err.field) == (line, field)
    if message is not None:
        assert str(err) == f"{tmp_path / 'config.yaml'}:{message}"


def test_api_key_literal_is_refused_and_not_echoed(tmp_path):
    secret = "sk-live-0123456789abcdef"
    err = user_error(
        tmp_path, f"providers:\n  openai:\n    kind: openai\n    base_url: https://x\n    api_key: {secret}\n"
    )
    assert (err.line, err.field) == (5, "providers.openai.api_key")
    assert "api_key_env: OPENAI_API_KEY" in str(err)
    assert secret not in str(err)


def test_key_in_api_key_env_is_refused_and_not_echoed(tmp_path):
    secret = "sk-live-0123456789abcdef"
    err = user_error(
        tmp_path,
        f"providers:\n  openai:\n    kind: openai\n    base_url: https://x\n    api_key_env: {secret}\n",
    )
    assert (err.line, err.field) == (5, "providers.openai.api_key_env")
    assert "OPENAI_API_KEY" in str(err) and secret not in str(err)


def test_credential_header_is_refused(tmp_path):
    err = user_error(
        tmp_path,
        "providers:\n  p:\n    kind: openai\n    base_url: https://x\n    headers:\n      Authorization: Bearer k\n",
    )
    assert (err.line, err.field) == (6, "providers.p.headers.Authorization")
    assert "api_key_env" in str(err) and "Bearer" not in str(err)


def test_unreadable_and_non_utf8_files(tmp_path):
    bad = tmp_path / "mm.yaml"
    bad.write_bytes(b"model: x\nsystem: \xff\n")
    with pytest.raises(ConfigError, match=r"mm.yaml:2: not UTF-8 text"):
        load_agent_file(bad)
    with pytest.raises(ConfigError, match="cannot read it"):
        load_agent_file(tmp_path / "missing.yaml")


# -- loading ----------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "~\n"])
def test_empty_agent_file_is_defaults(tmp_path, text):
    agent = load_agent_file(write(tmp_path / "mm.yaml", text))
    assert agent.digest == hashlib.sha256(text.encode()).hexdigest()  # what `mm trust` keeps of it
    assert msgspec.structs.replace(agent, digest="") == AgentFile(path=str(tmp_path / "mm.yaml"))
    assert (agent.model, agent.builtins, agent.skills, agent.yolo, agent.max_steps) == (
        None,
        None,
        [],
        False,
        None,
    )


def test_agent_file_values_and_relative_skills(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write(
        tmp_path / "proj" / ".mm" / "agent.yaml",
        "model: local/qwen\nsystem: |\n  You help.\n  Be brief.\nyolo: true\nbuiltins: []\n"
        "skills: [./skills, ../shared/skills, /abs/skills, ~/my-skills]\nmax_steps: 7\n",
    )
    agent = load_agent_file(path)
    base = tmp_path / "proj" / ".mm"
    assert agent.base_dir == base and agent.path == str(path)
    assert (agent.model, agent.system, agent.yolo, agent.builtins, agent.max_steps) == (
        "local/qwen",
        "You help.\nBe brief.\n",
        True,
        [],
        7,
    )
    assert agent.skills == [
        str(base / "skills"),
        str(tmp_path / "proj" / "shared" / "skills"),
        "/abs/skills",
        str(tmp_path / "home" / "my-skills"),
    ]


def test_relative_agent_path_is_made_absolute(tmp_path, monkeypatch):
    write(tmp_path / "a" / "mm.yaml", "skills: [s]\n")
    monkeypatch.chdir(tmp_path)
    agent = load_agent_file(Path("a/mm.yaml"))
    assert agent.skills == [str(tmp_path / "a" / "s")]


def test_an_agent_file_listing_more_skills_folders_than_the_limit_is_refused_at_the_first_past_it(tmp_path):
    # skills: is no power, so a cloned repository's mm.yaml is read without trust: 20,000 entries of it were
    # read, checked and listed at every prompt. A folder holds any number of skills; 64 folders are plenty.
    at_limit = "skills:\n" + "".join(f"  - s{i}\n" for i in range(64))
    assert len(load_agent_file(write(tmp_path / "ok" / "mm.yaml", at_limit)).skills) == 64
    assert str(agent_error(tmp_path, at_limit + "  - s64\n  - s65\n")) == (
        f"{tmp_path / 'mm.yaml'}:66: skills[64]: 66 skills folders listed; the limit is 64 — a folder holds "
        "any number of skills (a subfolder each): gather them in fewer folders, or list the others in "
        "another agent file (--agent FILE)"
    )


def test_defaults_have_no_base_dir():
    assert AgentFile().base_dir is None


def test_merge_keys_and_anchors(tmp_path):
    config = load_user_config(
        write(
            tmp_path / "config.yaml",
            "providers:\n"
            "  a: &base {kind: openai, base_url: 'http://a', timeout: 30}\n"
            "  b:\n    <<: *base\n    base_url: http://b\n",
        )
    )
    assert config.providers["b"].timeout == 30.0 and config.providers["b"].base_url == "http://b"


def test_merge_precedence_and_aliases_used_twice(tmp_path):
    doc = parse(
        "x.yaml",
        "a: &a {p: 1, q: 1}\nb: &b {q: 2, r: 2}\nc: &c\n  <<: [*a, *b]\n  r: 3\nd: *c\ne: {<<: *c}\n",
    )
    assert doc.data["c"] == {"p": 1, "q": 1, "r": 3}
    assert doc.data["d"] == doc.data["e"] == doc.data["c"]
    assert doc.lines[("c", "r")] == 5


def test_merge_of_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="can merge only maps"):
        parse("x.yaml", "a: &a 3\nb: {<<: *a}\n")


def test_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match="refers to itself"):
        parse("x.yaml", "skills: &a [*a]\n").convert(AgentFile)


def test_a_text_parsed_again_gives_fresh_values_an_edit_is_seen_and_a_bad_text_fails_every_time(tmp_path):
    # Every prompt parses config.yaml and the agent file again; the YAML nodes of a text are kept, the
    # values are built anew each time (the loaders change the ones they get).
    text = "a: &a {p: [1, 2]}\nb: {<<: *a, q: 3}\n"
    first, second = parse("x.yaml", text), parse("x.yaml", text)
    assert first.data == second.data == {"a": {"p": [1, 2]}, "b": {"p": [1, 2], "q": 3}}
    first.data["a"]["p"].append(9)
    first.data["b"]["q"] = 0
    assert parse("x.yaml", text).data == {"a": {"p": [1, 2]}, "b": {"p": [1, 2], "q": 3}}
    providers = "providers:\n  a: {kind: openai, base_url: 'http://a'}\n"
    path = write(tmp_path / "config.yaml", providers + "default_model: a/b\n")
    assert load_user_config(path).default_model == "a/b"
    write(path, providers + "default_model: a/c\n")  # same size, maybe the same mtime: the text decides
    assert load_user_config(path).default_model == "a/c"
    for _ in range(2):
        with pytest.raises(ConfigError, match="invalid YAML"):
            parse("x.yaml", "a: [1, 2\n")


# -- discovery --------------------------------------------------------------


def test_find_agent_file_order(tmp_path):
    assert find_agent_file(tmp_path, None) is None
    hidden = write(tmp_path / ".mm" / "agent.yaml", "")
    assert find_agent_file(tmp_path, None) == hidden
    top = write(tmp_path / "mm.yaml", "")
    assert find_agent_file(tmp_path, None) == top
    other = write(tmp_path / "agents" / "release.yaml", "")
    assert find_agent_file(tmp_path, "agents/release.yaml") == other
    assert find_agent_file(tmp_path / "agents", str(other)) == other


def test_find_agent_file_explicit_missing(tmp_path):
    (tmp_path / "adir").mkdir()
    for name in ("nope.yaml", "adir"):
        with pytest.raises(ConfigError) as info:
            find_agent_file(tmp_path, name)
        assert str(info.value).startswith(f"{tmp_path / name}: agent file not found — ")


# -- user config and models -------------------------------------------------

CONFIG = """\
providers:
  local:
    kind: openai
    base_url: http://127.0.0.1:8080/v1
  claude:
    kind: anthropic
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    timeout: 60
    headers: {anthropic-beta: tools}
models:
  fast: {provider: local, model: qwen2.5-coder-1.5b}
default_model: fast
daemon:
  max_steps: 20
"""


@pytest.fixture
def config(tmp_path) -> UserConfig:
    return load_user_config(write(tmp_path / "config.yaml", CONFIG))


def test_user_config_values(config, tmp_path):
    claude = config.providers["claude"]
    assert (claude.kind, claude.api_key_env, claude.timeout, claude.max_retries, claude.max_tokens) == (
        "anthropic",
        "ANTHROPIC_API_KEY",
        60.0,
        4,
        None,  # not set: the Anthropic provider sends 4096, an openai-kind one sends none
    )
    assert claude.headers == {"anthropic-beta": "tools"}
    assert config.providers["local"].api_key_env is None
    assert config.daemon == DaemonConfig(max_steps=20)
    assert config.path == str(tmp_path / "config.yaml")


def test_missing_user_config_is_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = load_user_config()
    assert config == UserConfig(path=str(tmp_path / "mm" / "config.yaml"))
    assert (config.daemon.max_steps, config.daemon.tool_timeout, config.daemon.grace) == (50, 120.0, 3.0)
    assert (config.daemon.output_max_bytes, config.daemon.output_max_lines) == (30_000, 400)


def test_resolve_model(config):
    assert resolve_model(config, "fast")[1:] == ("local", "qwen2.5-coder-1.5b")
    assert resolve_model(config, "fast")[0] is config.providers["local"]
    assert resolve_model(config, "claude/claude-sonnet-4")[1:] == ("claude", "claude-sonnet-4")
    assert resolve_model(config, "local/org/model:q4")[1:] == ("local", "org/model:q4")


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("fsat", ['unknown model alias "fsat"', "an alias (one of fast)", 'did you mean "fast"?']),
        ("big", ['unknown model alias "big"', "add the alias under models: in"]),
        ("lcal/m", ['unknown provider "lcal" in "lcal/m"', "a provider (one of claude, local)", '"local"']),
        ("gpt/x", ['unknown provider "gpt"', "add it under providers: in"]),
        ("local/", ['unknown provider "local" in "local/"']),
    ],
)
def test_resolve_model_errors(config, ref, says):
    with pytest.raises(ConfigError) as info:
        resolve_model(config, ref)
    assert info.value.field == "model" and info.value.file == config.path
    for text in says:
        assert text in str(info.value)


def test_resolve_model_without_providers():
    with pytest.raises(
        ConfigError, match=r'unknown provider "local" in "local/m" — add it under providers: in'
    ):
        resolve_model(UserConfig(), "local/m")


# -- helpers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), ""),
        (("model",), "model"),
        (("tools", 0, "name"), "tools[0].name"),
        (("providers", "my.host", "kind"), 'providers["my.host"].kind'),
        (("providers", "local-1", "headers", "X-Team"), "providers.local-1.headers.X-Team"),
    ],
)
def test_dotted(path, text):
    assert dotted(path) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "an empty value"),
        (True, "a boolean (true)"),
        (3, "an integer (3)"),
        (2.5, "a number (2.5)"),
        ("x" * 50, f'a string ("{"x" * 39}…")'),
        ([1], "a list"),
        ({}, "a map"),
    ],
)
def test_describe(value, text):
    assert describe(value) == text


def test_error_without_line_or_field():
    err = ConfigError(file="environment", line=None, field="KEY", found="not set", expected="the key")
    assert str(err) == "environment: KEY: expected the key, found not set"
    assert os.fspath(Path(ConfigError(file=Path("a.yaml"), line=2, field="", problem="bad").file)) == "a.yaml"


def test_secret_variables_name_the_keys_and_the_mcp_credentials(tmp_path):
    from mmd.config.secrets import secret_variables

    path = tmp_path / "config.yaml"
    path.write_text(
        "providers:\n"
        "  cloud: {kind: anthropic, base_url: 'https://x', api_key_env: MY_LLM_ACCESS}\n"
        "  local: {kind: openai, base_url: 'http://127.0.0.1:1/v1'}\n"
        "mcp:\n"
        "  rel: {url: 'https://r/mcp', headers: {Authorization: 'Bearer ${REL_AUTH}', X-Org: '${ORG:-a}'}}\n"
        "  gh: {command: gh-mcp, env: {GITHUB_PERSONAL_ACCESS_TOKEN: '${GH_ACCESS}', PATH: '${PATH}:/opt'}}\n"
    )
    assert secret_variables(load_user_config(path)) == {"MY_LLM_ACCESS", "REL_AUTH", "ORG", "GH_ACCESS"}


def test_a_file_past_one_mebibyte_is_refused_at_the_line_where_it_passes(tmp_path):
    from mmd.config.loader import MAX_FILE_BYTES

    path = tmp_path / "mm.yaml"
    raw = "system: x\n" + ("# " + "c" * 97 + "\n") * (MAX_FILE_BYTES // 100 + 10)  # comments past 1 MiB
    path.write_text(raw)
    line = raw.encode()[:MAX_FILE_BYTES].count(b"\n") + 1
    with pytest.raises(ConfigError) as caught:
        load_agent_file(path)
    assert (caught.value.line, caught.value.field) == (line, "")
    assert f"the file is {len(raw.encode()):,} bytes; the limit is 1,048,576 bytes (1 MiB)" in str(
        caught.value
    )


def test_a_fifo_or_folder_in_place_of_the_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # nobody writes it: opening it for reading must not wait
    with pytest.raises(ConfigError, match=r"fifo\.yaml: not a regular file"):
        parse(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        parse(tmp_path)


def test_nesting_and_aliases_past_the_limits_name_their_line():
    with pytest.raises(ConfigError, match=r"^x\.yaml:2: maps and lists nested more than 64 levels deep"):
        parse("x.yaml", "model: m\nsystem: " + "[" * 65 + "]" * 65 + "\n")
    parse("x.yaml", "model: m\nsystem: " + "[" * 63 + "]" * 63 + "\n")  # 64 with the top map
    bomb = "a: &a [" + "x, " * 99 + "x]\n" + "b: [" + "*a, " * 300 + "*a]\n"
    with pytest.raises(ConfigError, match=r"^x\.yaml:2: more than 20,000 values .*the alias \*a here"):
        parse("x.yaml", bomb)


def test_a_file_read_again_unchanged_is_not_built_again_and_any_change_is_seen(tmp_path, monkeypatch):
    # Every prompt reads config.yaml and the agent file: the same text at the same path (and $HOME: `~` is
    # expanded) gives the same Structs, built once; anything else is built anew.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write(tmp_path / "a" / "config.yaml", "sandbox:\n  writable: [~/cache, out]\n")
    first = load_user_config(path)
    assert load_user_config(path) is first
    write(path, "sandbox:\n  writable: [~/cache, out2]\n")  # an edit
    edited = load_user_config(path)
    assert edited is not first and edited.sandbox.writable[1] == str(tmp_path / "a" / "out2")
    moved = load_user_config(
        write(tmp_path / "b" / "config.yaml", path.read_text())
    )  # the same text elsewhere
    assert moved.sandbox.writable[1] == str(tmp_path / "b" / "out2")
    monkeypatch.setenv("HOME", str(tmp_path / "other"))
    assert load_user_config(path).sandbox.writable[0] == str(tmp_path / "other" / "cache")
    # A text that fails is refused every time, and is read afresh once fixed.
    write(path, "sandbox: sideways\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="sandbox"):
            load_user_config(path)
    write(path, "sandbox: off\n")
    assert load_user_config(path).sandbox.mode == "off"
    # What is shared between prompts cannot be changed by one of them.
    with pytest.raises(AttributeError):
        first.sandbox = edited.sandbox  # type: ignore[misc]
    agent = write(tmp_path / "repo" / "mm.yaml", "model: a/b\nskills: [~/skills]\n")
    loaded = load_agent_file(agent)
    assert load_agent_file(agent) is loaded and loaded.skills == [str(tmp_path / "other" / "skills")]
    with pytest.raises(AttributeError):
        loaded.model = "c/d"  # type: ignore[misc]


def test_an_agent_file_read_before_is_still_refused_once_it_is_a_link_out_of_its_project(
    tmp_path, monkeypatch
):
    # The link is looked at before the text is: the same text, now behind a link out of the project.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    agent = write(project / "mm.yaml", "model: a/b\n")
    assert load_agent_file(agent).model == "a/b"
    outside = write(tmp_path / "elsewhere" / "agent.yaml", "model: a/b\n")
    agent.unlink()
    agent.symlink_to(outside)
    with pytest.raises(ConfigError, match="a symbolic link to"):
        load_agent_file(agent)


def test_the_files_loaded_and_kept_between_prompts_stay_within_their_budget(tmp_path):
    # A cloned repository's many or long agent files must not grow the daemon: a text past LOADED_MAX_TEXT
    # is not kept; all kept texts fit LOADED_BUDGET, the latest kept.
    long = write(tmp_path / "long.yaml", "model: a/b\nsystem: " + "y" * loader.LOADED_MAX_TEXT + "\n")
    assert load_agent_file(long) is not load_agent_file(long)  # too long to keep: loaded every time
    for i in range(100):
        load_agent_file(write(tmp_path / f"a{i}.yaml", f"model: a/b\nsystem: {'p' * 900} {i}\n"))
    assert sum(len(key[-1]) for key in loader._LOADED) <= loader.LOADED_BUDGET
    latest = load_agent_file(tmp_path / "a99.yaml")
    assert load_agent_file(tmp_path / "a99.yaml") is latest


def test_empty_files_by_the_thousand_leave_the_files_kept_between_prompts_within_their_cap(tmp_path):
    # An empty text weighed nothing, so its entries were never let go (20,000 folders' empty mm.yaml: 20,000
    # entries, ~37 MiB): each entry weighs its path and a fixed overhead too, and their number is capped.
    for i in range(10_000):
        load_agent_file(write(tmp_path / f"a{i}.yaml", ""))
    assert len(loader._LOADED) <= loader.LOADED_ENTRIES
    latest = load_agent_file(tmp_path / "a9999.yaml")
    assert load_agent_file(tmp_path / "a9999.yaml") is latest


def test_the_sandbox_of_config_yaml_short_or_whole_with_its_folders_made_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        load_user_config(write(tmp_path / "a" / "config.yaml", "sandbox: read-only\n")).sandbox.mode
        == "read-only"
    )
    assert load_user_config(write(tmp_path / "b" / "config.yaml", "sandbox: off\n")).sandbox.mode == "off"
    text = "sandbox:\n  writable: [~/.cache/uv, shared]\n  network: off\n"
    box = load_user_config(write(tmp_path / "c" / "config.yaml", text)).sandbox
    assert box.writable == [str(tmp_path / "home" / ".cache" / "uv"), str(tmp_path / "c" / "shared")]
    assert (box.mode, box.network) == (None, False)
    assert load_user_config(tmp_path / "none.yaml").sandbox.writable == []


# -- values Python cannot build ---------------------------------------------

TOO_LARGE = (
    "past 64 bits (the most is 9,223,372,036,854,775,807); no setting takes one that large: "
    "write a smaller number, or quote it if it is text"
)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1" * 5000, f"an integer of 5,000 characters, {TOO_LARGE}"),  # past Python's 4,300 digits
        ("-" + "9" * 4400, f"an integer of 4,401 characters, {TOO_LARGE}"),
        ("9223372036854775808", f"an integer of 19 characters, {TOO_LARGE}"),
        ("0b" + "1" * 20_000, f"an integer of 20,002 characters, {TOO_LARGE}"),  # read, but beyond any use
        ("1" + ":59" * 40, f"an integer of 121 characters, {TOO_LARGE}"),  # YAML 1.1's base 60
        ("2023-02-30", "day is out of range for month ('2023-02-30')"),
    ],
    ids=["5000 digits", "minus 4400 digits", "2**63", "binary", "base 60", "no such day"],
)
def test_a_value_python_cannot_build_is_a_config_error_naming_file_line_and_field(tmp_path, value, problem):
    err = agent_error(tmp_path, f"model: x\nloop:\n  repeat: {value}\n")
    assert (err.file, err.line, err.field) == (str(tmp_path / "mm.yaml"), 3, "loop.repeat")
    assert err.problem == f"invalid value: {problem}"
    largest = parse(tmp_path / "x.yaml", "a: 9223372036854775807\nb: -9223372036854775807\n")
    assert largest.data == {"a": 2**63 - 1, "b": -(2**63 - 1)}  # 64 bits still read


def test_a_json_file_beside_the_agent_file_with_an_integer_past_64_bits_is_a_config_error(tmp_path):
    big = "1" * 5000
    mcp = write(tmp_path / ".mcp.json", f'{{"mcpServers": {{\n"a": {{"command": "x", "timeout": {big}}}}}}}')
    settings = write(tmp_path / ".claude" / "settings.json", f'{{\n\n"hooks": {big}}}')
    for path, read, line in (
        (mcp, lambda p: read_servers(p, run_dir=tmp_path), 2),
        (settings, claude_settings_hooks, 3),
    ):
        with pytest.raises(ConfigError) as info:
            read(path)
        assert (info.value.file, info.value.line) == (str(path), line)
        assert info.value.problem == f"an integer of 5,000 characters, {TOO_LARGE}"


def test_a_skill_whose_front_matter_holds_an_integer_past_64_bits_is_skipped_with_its_line(tmp_path):
    write(
        tmp_path / "skills" / "big" / "SKILL.md",
        f"---\nname: big\ndescription: x\nversion: {'1' * 5000}\n---\nbody\n",
    )
    skills, warnings = load_skills([tmp_path / "skills"])
    assert skills.names() == [] and len(warnings) == 1
    assert (
        f"bad YAML in the front matter at line 4: an integer of 5,000 characters, {TOO_LARGE}" in warnings[0]
    )


# -- agent files reached through symbolic links -----------------------------


def test_an_agent_file_linked_out_of_the_project_is_refused_naming_the_link_and_quoting_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / "sub").mkdir()
    secret = write(tmp_path / "home" / "shadow", "root:$6$SECRET-HASH:20228:0:99999:7:::\n")
    (project / "mm.yaml").symlink_to(secret)
    (project / ".mm").symlink_to(secret.parent, target_is_directory=True)  # a folder on the way
    (secret.parent / "agent.yaml").symlink_to(secret)
    for link in (project / "mm.yaml", project / ".mm" / "agent.yaml"):
        with pytest.raises(ConfigError) as info:
            load_agent_file(link)
        assert (info.value.file, info.value.line) == (str(link), None)
        assert info.value.problem == (
            f"a symbolic link to {secret}, outside the project ({project}) and your config folder "
            f"({tmp_path / 'config' / 'mm'})"
        )
        assert "SECRET" not in str(info.value) and "99999" not in str(info.value)
    # Found in the project or named with --agent, as tools.check and a prompt read it.
    with pytest.raises(ConfigError, match="a symbolic link to"):
        load_agent_file(find_agent_file(project, None))
    with pytest.raises(ConfigError, match="a symbolic link to"):
        load_agent_file(find_agent_file(project / "sub", "../mm.yaml"))
    # A link that stays inside the project, or leads to the user's own config folder, is followed.
    (project / "mm.yaml").unlink()
    (project / "mm.yaml").symlink_to(write(project / "agents" / "dev.yaml", "model: a/b\n"))
    assert load_agent_file(project / "mm.yaml").model == "a/b"
    shared = write(tmp_path / "config" / "mm" / "agents" / "shared.yaml", "model: c/d\n")
    (project / "shared.yaml").symlink_to(shared)
    assert load_agent_file(project / "shared.yaml").model == "c/d"
