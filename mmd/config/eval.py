"""The ``mm eval`` fixture file (eval.yaml), as Structs, and its checks.

A fixture folder holds an ``eval.yaml`` (modes, cases, runs) and one agent
file per mode; docs/eval.md describes the format. The daemon checks a fixture
for the client (the ``eval.load`` method), every mode's agent file included,
so a broken one is reported before the first run with its own file and line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import msgspec

from .agent import load_agent_file
from .loader import ConfigError, Document, parse

FIXTURE_FILE = "eval.yaml"


class CaseSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, description="a short name like release")]
    expect: Annotated[
        list[str],
        msgspec.Meta(min_length=1, description="the argv the action must receive, program name first"),
    ]
    prompts: Annotated[
        dict[str, str], msgspec.Meta(min_length=1, description="a map of language to prompt, like en: ...")
    ]


class FixtureSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    runs: Annotated[int, msgspec.Meta(ge=1)] = 5
    modes: Annotated[
        dict[str, str], msgspec.Meta(min_length=1, description="a map of mode name to agent file")
    ]
    cases: Annotated[list[CaseSpec], msgspec.Meta(min_length=1)]
    log: str = "argv.log"  # the file the actions append their argv to, in the working directory
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 300.0  # seconds per run


class NoFixture(Exception):
    """The path holds no eval.yaml; the message says what a fixture is."""


def fixture_file(path: Path) -> Path:
    """The eval.yaml of *path*: a fixture folder, or the yaml file itself.

    Errors: NoFixture.
    """
    file = path / FIXTURE_FILE if path.is_dir() else path
    if not file.is_file():
        raise NoFixture(
            f"{path}: no {FIXTURE_FILE} here; a fixture is a folder with an {FIXTURE_FILE} "
            "(docs/eval.md; contrib/eval is an example)"
        )
    return file


def load_fixture(file: Path) -> FixtureSpec:
    """Read and check *file*, and load every mode's agent file (relative to its folder).

    Errors: ConfigError naming the file, line and field.
    """
    doc = parse(file)
    spec = doc.convert(FixtureSpec)
    _check_names(doc, spec)
    if os.sep in spec.log or spec.log in ("", ".", ".."):
        raise doc.error(("log",), problem=f"{spec.log!r} is not a file name", expected="a name like argv.log")
    for mode, agent in spec.modes.items():
        agent_path = file.parent / agent
        if not agent_path.is_file():
            raise doc.error(
                ("modes", mode),
                problem=f"the agent file {agent_path} does not exist",
                hint="give a path relative to the fixture's folder",
            )
        load_agent_file(agent_path)
    return spec


def _check_names(doc: Document, spec: FixtureSpec) -> None:
    seen: dict[str, int] = {}
    for index, case in enumerate(spec.cases):
        if case.name in seen:
            raise doc.error(
                ("cases", index, "name"),
                problem=f'"{case.name}" is used twice; the first is cases[{seen[case.name]}]',
                hint="give each case its own name",
            )
        seen[case.name] = index


__all__ = [
    "FIXTURE_FILE",
    "CaseSpec",
    "ConfigError",
    "FixtureSpec",
    "NoFixture",
    "fixture_file",
    "load_fixture",
]
