"""The commands a skill names (mmd/tools/skillcmds.py): templates, their placeholders and example values."""

from __future__ import annotations

import pytest

from mmd.tools.skillcmds import commands, tool_specs

OPS = """# Operations

- Publish a release: `./actions/release VERSION CHANNEL`
  VERSION looks like 1.4.2; CHANNEL is `stable` or `beta`.
  Example: `./actions/release 2.0.1 stable`
- Back up a database:

```bash
$ ./tools/backup <database> --to {{bucket}}
$ ./tools/backup inventory --to s3-main
```

- Compare with the last commit: `git diff HEAD`; show a file: `cat README`.
"""


def test_templates_come_from_inline_code_and_fenced_blocks_with_their_examples() -> None:
    found = commands("ops", OPS)
    assert [t.text for t in found.templates] == [  # in the order the skill names them
        "./actions/release VERSION CHANNEL",
        "./tools/backup <database> --to {{bucket}}",
    ]
    release, backup = found.templates
    # The prose each is written with: its own line's, or the line before its fenced block.
    assert (release.said, backup.said) == ("Publish a release", "Back up a database")
    assert backup.slots == {1: "<database>", 3: "{{bucket}}"}
    assert backup.examples == {1: frozenset({"inventory"}), 3: frozenset({"s3-main"})}
    assert release.slots == {1: "VERSION", 2: "CHANNEL"}
    assert release.examples == {1: frozenset({"2.0.1"}), 2: frozenset({"stable"})}


def test_words_in_capitals_are_placeholders_only_with_an_example_or_a_mention_and_never_a_git_ref() -> None:
    assert commands("s", "Run `git diff HEAD` and `cat README` and `make ALL`.").templates == ()
    # Named in the prose: a placeholder although no example shows it.
    [t] = commands("s", "Run `./scale SERVICE`. SERVICE is the service's name.").templates
    assert t.slots == {1: "SERVICE"} and t.examples == {}
    # An example with another value in its place makes it one.
    [t] = commands("s", "`./pkgtest PACKAGE`, e.g. `./pkgtest parser`").templates
    assert t.examples == {1: frozenset({"parser"})}


@pytest.mark.parametrize(
    ("command", "heard", "why"),
    [
        ("./actions/release 2.0.1 beta", "release 1.4.2 to beta", '"2.0.1" is the example value for VERSION'),
        (
            "./actions/release 1.4.2 stable",
            "release 1.4.2 to beta",
            '"stable" is the example value for CHANNEL',
        ),
        ("cd x && ./actions/release VERSION beta", "", "VERSION is a placeholder"),
        ("./tools/backup <database> --to b", "", "<database> is a placeholder"),
        ("sudo ./tools/backup inventory --to b", "orders", '"inventory" is the example value for <database>'),
    ],
)
def test_an_unfilled_placeholder_or_an_example_value_nobody_gave_is_refused(
    command: str, heard: str, why: str
) -> None:
    refusal = commands("ops", OPS).refusal(command, heard)
    assert refusal is not None and refusal.startswith(why)
    assert "the user" in refusal


@pytest.mark.parametrize(
    "command",
    [
        "./actions/release 1.4.2 beta",  # the user's values
        "./actions/release 2.0.1 stable",  # the example's values, which the user asked for (heard below)
        "VERSION=2.0.1 ./actions/release $VERSION stable",  # the shell fills it
        "echo VERSION",  # not the skill's command
        "./actions/release 'unbalanced",  # split plainly, still checked, nothing found
    ],
)
def test_a_command_with_the_users_values_runs(command: str) -> None:
    assert commands("ops", OPS).refusal(command, "release 2.0.1 to stable, then 1.4.2 to beta") is None


def test_a_failed_guess_is_told_the_skills_commands() -> None:
    found = commands("ops", OPS)
    same = found.hint("release 1.4.2 beta")  # the skill's program, not run from where it is
    assert same == (
        "The skill ops runs this as `./actions/release VERSION CHANNEL`, from the working directory, "
        "with the values from the user's request in place of the placeholders."
    )
    other = found.hint("pg_dump orders > x.sql")
    assert other is not None and other.startswith("This is not a command the skill ops names.")
    assert (
        "`./tools/backup <database> --to {{bucket}}`" in other
        and "`./actions/release VERSION CHANNEL`" in other
    )
    # The skill's own command failed: its output says why; nothing is added. "actions/release" is the same
    # path as "./actions/release"; a bare "release" is not (bash looks it up on PATH).
    assert found.hint("./actions/release 1.4.2 beta") is None
    assert found.hint("actions/release 1.4.2 beta") is None
    assert commands("s", "`./run NAME`, e.g. `./run x`").hint("run y") is not None
    assert commands("s", "Be kind.").hint("ls") is None  # a skill that names no command adds nothing


def test_a_hostile_skill_is_bounded() -> None:
    body = "\n".join(f"`./run{i} ARG{i}` ARG{i} is a thing" for i in range(500)) + "\n`" + "x" * 10_000 + "`"
    assert len(commands("big", body).templates) == 40


def test_templates_become_declared_tools_named_after_their_programs() -> None:
    found = commands("ops", OPS + "\nUpload: `./bin/my-tool.sh <file>`; clean: `3d-clean {{what}}`\n")
    specs = {s.name: s for s in tool_specs(found, taken={"bash", "release"})}
    # "release" is taken (another tool has that name): the skill's name goes before it.
    assert list(specs) == ["ops_release", "backup", "my-tool_sh", "run_3d-clean"]
    release = specs["ops_release"]
    assert release.command == ["./actions/release", "{{version}}", "{{channel}}"]
    assert (
        release.description
        == "Publish a release (the skill ops's command `./actions/release VERSION CHANNEL`)."
    )
    assert {n: (p.type, p.required, p.allow_dash) for n, p in release.parameters.items()} == {
        "version": ("string", True, False),
        "channel": ("string", True, False),
    }
    assert release.effects == "write"  # what a command does is unknown: consent as for bash
    assert specs["backup"].command == ["./tools/backup", "{{database}}", "--to", "{{bucket}}"]
    # An interpreter's template is named after its script.
    runner = commands(
        "forms",
        "Fill it: `python scripts/fill_form.py INPUT OUTPUT`, e.g. `python scripts/fill_form.py a.pdf b.pdf`",
    )
    [spec] = tool_specs(runner, taken=())
    assert (spec.name, spec.command) == (
        "fill_form",
        ["python", "scripts/fill_form.py", "{{input}}", "{{output}}"],
    )
    # Taken under both names: left to bash.
    assert "ops_release" not in {s.name for s in tool_specs(found, taken={"release", "ops_release"})}


def test_a_literal_word_that_reads_as_a_declared_placeholder_is_not_made_a_tool() -> None:
    found = commands("s", "`./run {{a}}-{{b}} NAME` where NAME is a name")
    assert [t.slots for t in found.templates] == [{2: "NAME"}]
    assert tool_specs(found, taken=()) == []  # "{{a}}-{{b}}" would be filled from parameters nobody declared
