"""Hostile agent files refused by the loader, exactly at the limit (issue 13), generated.

A real daemon reading hostile agent files is in tests/e2e/adversarial/test_agent_files.py.
"""

from __future__ import annotations

import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mmd.config.loader import ConfigError, parse
from mmd.untrusted import MAX_YAML_DEPTH, MAX_YAML_VALUES

from ...budget import examples


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 130), st.integers(0, 130), st.sampled_from(["[", "{k: "]))
def test_nesting_is_refused_exactly_past_the_limit_at_the_line_where_it_passes(block, flow, opener):
    # `block` maps written one per line and indented, then `flow` brackets on the last line.
    lines = ["  " * j + f"k{j}:" for j in range(block)]
    closer = "]" if opener == "[" else "}"
    lines.append("  " * block + f"k{block}: " + opener * flow + "x" + closer * flow)
    depth = block + 1 + flow
    try:
        doc = parse("x.yaml", "\n".join(lines) + "\n")
    except ConfigError as err:
        assert depth > MAX_YAML_DEPTH
        assert err.line == (MAX_YAML_DEPTH + 1 if block + 1 > MAX_YAML_DEPTH else block + 1)
        assert err.problem == (
            f"maps and lists nested more than {MAX_YAML_DEPTH} levels deep; the limit is {MAX_YAML_DEPTH}"
        )
    else:
        assert depth <= MAX_YAML_DEPTH
        assert doc.data == yaml.safe_load("\n".join(lines))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=8))
def test_aliases_are_refused_exactly_when_what_they_repeat_passes_the_budget(widths):
    # Line i: `a<i>: &a<i> [...]` holding widths[i] scalars (i = 0) or aliases of the line before.
    lines, sizes, total, crossing = [], [], 1, None  # the top map is one value
    for i, width in enumerate(widths):
        items = ["x"] * width if i == 0 else [f"*a{i - 1}"] * width
        lines.append(f"a{i}: &a{i} [{', '.join(items)}]")
        total += 2  # the key and the list
        if total > MAX_YAML_VALUES and crossing is None:
            crossing = i + 1
        for _ in range(width):
            total += 1 if i == 0 else sizes[-1]
            if total > MAX_YAML_VALUES and crossing is None:
                crossing = i + 1
        sizes.append(1 + width * (1 if i == 0 else sizes[-1]))
    text = "\n".join(lines) + "\n"
    try:
        doc = parse("x.yaml", text)
    except ConfigError as err:
        assert crossing is not None and err.line == crossing, (total, err)
        assert re.match(
            rf"more than {MAX_YAML_VALUES:,} values in the file( \(the alias \*a\d+ here|;)", err.problem
        )
    else:
        assert crossing is None
        assert doc.data == yaml.safe_load(text)
