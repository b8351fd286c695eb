"""The context budget's arithmetic (mmd/turn/budget.py): pure numbers and texts, no I/O.

The budget at work — cuts, stubs and summaries in a real session — is tests/unit/turn/test_context.py;
end to end with the scripted model server tests/e2e/test_context.py, with the real 0.5B
tests/e2e/test_local.py's long session.
"""

from __future__ import annotations

from mmd.models.base import Message, ToolCall
from mmd.turn import budget
from mmd.turn.budget import Window


def test_a_local_window_keeps_its_max_tokens_for_the_answer_and_gives_a_quarter_to_one_output() -> None:
    w = Window.of(8192, 1024)
    assert (w.tokens, w.answer, w.room) == (8192, 1024, 7168)
    assert (w.stub_at, w.stub_to) == (5376, 3584)
    assert w.output_tokens == 2048
    assert w.output_bytes(30_000) == 2048 * budget.CAP_BYTES_PER_TOKEN
    assert w.output_bytes(1_000) == 1_000  # never above the config's output_max_bytes


def test_without_max_tokens_the_answer_gets_an_eighth_of_the_window_at_most_4096() -> None:
    assert Window.of(32_768, None).answer == 4096
    assert Window.of(200_000, None).answer == 4096
    assert Window.of(8192, None).answer == 1024
    assert Window.of(1000, 900).answer == 500  # never more than half the window


def test_the_window_is_the_smaller_of_config_and_server_else_the_catalog_else_the_kind_default() -> None:
    assert budget.window_tokens("openai", config=16_384, server=8192, catalog=None) == (8192, "server")
    assert budget.window_tokens("openai", config=4096, server=8192, catalog=None) == (4096, "config")
    assert budget.window_tokens("openai", config=None, server=None, catalog=8192) == (8192, "catalog")
    assert budget.window_tokens("openai", config=None, server=None, catalog=None) == (32_768, "default")
    assert budget.window_tokens("anthropic", config=None, server=None, catalog=None) == (200_000, "default")
    assert budget.window_tokens("other", config=None, server=None, catalog=None)[0] == budget.FALLBACK_WINDOW


def test_a_text_denser_than_its_share_is_cut_in_proportion_with_a_tenth_to_spare() -> None:
    assert budget.cut_bytes(6000, 3000, 2000) == 3600  # 2 bytes a token: 4000 would do, 3600 is kept
    assert budget.cut_bytes(6000, 3000, 2000, overhead=200) == 3400  # the marker's bytes come off
    assert budget.cut_bytes(10, 10_000, 1) == 1


def _tool(content: str, call_id: str = "c") -> Message:
    return Message(role="tool", tool_call_id=call_id, name="bash", content=content)


def _call(call_id: str = "c") -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=call_id, name="bash", arguments="{}")])


def test_only_long_tool_outputs_that_are_no_stubs_yet_and_not_the_newest_may_become_stubs() -> None:
    long = "x" * budget.MIN_STUB_BYTES
    stub = budget.stub_text("bash", "a", 9000, "/s/output-a.log")
    messages = [
        Message(role="user", content=long),
        _call("a"),
        _tool(long, "a"),
        _tool("short", "b"),
        _tool(stub, "c"),
        _call("d"),
        _tool(long, "d"),  # a result of the last step, beside a newer one
        _tool(long, "e"),  # the newest: being read now
    ]
    assert budget.stubbable(messages) == [False, False, True, False, False, False, True, False]


def test_stubs_are_chosen_oldest_first_until_the_request_is_under_its_target() -> None:
    sizes = [100, 2000, 50, 2000, 2000]
    allowed = [False, True, True, True, True]
    # 6150 tokens, target 3000: the first two outputs (stub 64) bring it to 2278.
    assert budget.choose_stubs(sizes, allowed, 6150, 3000, 64) == [1, 3]
    assert budget.choose_stubs(sizes, allowed, 2500, 3000, 64) == []
    assert budget.choose_stubs(sizes, [False] * 5, 6150, 3000, 64) == []


def test_a_stub_names_the_call_its_size_and_the_file_that_holds_the_whole() -> None:
    text = budget.stub_text("bash", "call_3", 12_345, "/state/sessions/s/output-call_3.log")
    assert text == (
        "[output of bash call call_3, 12,345 bytes, removed to fit the context window; the whole is in "
        "/state/sessions/s/output-call_3.log — read_file it if needed]"
    )
    assert text.startswith(budget.STUB_PREFIX)


def test_the_spill_file_a_truncation_marker_names_is_found_even_with_spaces() -> None:
    marker = (
        "[... 9,000 bytes / 90 lines cut (lines 10–100); the whole output (12,000 bytes, 120 lines) is in "
        "/home/a b/output-x.log — read any range of it with read_file ...]"
    )
    assert budget.spill_named(f"head\n{marker}\ntail") == "/home/a b/output-x.log"
    assert budget.spill_named("no marker here") is None


def test_a_summary_keeps_the_newest_messages_that_fit_and_never_splits_a_call_from_its_result() -> None:
    roles = ["user", "assistant", "tool", "assistant", "tool", "user", "assistant", "tool"]
    sizes = [100, 50, 1000, 50, 1000, 100, 50, 1000]
    # The last step (6, 7) takes 1050; with the turn's prompt 1150; one more step 2200.
    assert budget.compaction_split(roles, sizes, keep=1200) == 5
    assert budget.compaction_split(roles, sizes, keep=2300) == 3
    assert budget.compaction_split(roles, sizes, keep=100) == 6  # at least the last step, whatever it takes
    assert budget.compaction_split(roles, sizes, keep=10_000) is None  # all fits: nothing to summarise
    assert budget.compaction_split(["tool"], [10], keep=0) is None


def test_the_newest_transcript_lines_that_fit_are_the_ones_summarised() -> None:
    assert budget.newest_fitting([5, 5, 5, 5], 12) == 2
    assert budget.newest_fitting([5, 5, 50], 12) == 3
    assert budget.newest_fitting([], 12) == 0


def test_a_transcript_line_cuts_long_outputs_and_shows_calls() -> None:
    line = budget.transcript_line(_tool("y" * 10_000))
    assert line.startswith("Result of bash: yyy") and line.endswith("[…8,500 bytes cut]")
    assert budget.transcript_line(_call("a")) == "Assistant: \n(calls bash {})"
    stub = _tool(budget.stub_text("bash", "a", 9000, "/state/sessions/s/output-a.log"))
    assert budget.transcript_line(stub) == "Result of bash: (a long output, removed earlier)"


def test_the_current_request_is_quoted_in_the_note_only_when_the_summary_swallows_it() -> None:
    older = [Message(role="user", content="count the files"), _call("a"), _tool("3", "a")]
    assert budget.pending_request(older, [_call("b"), _tool("4", "b")]) == "count the files"
    assert budget.pending_request(older, [Message(role="user", content="next")]) is None
    note = budget.note_text("The user asked to count files.", 4096, "count the files")
    assert note.startswith(budget.NOTE_PREFIX) and "4,096 tokens" in note
    assert note.endswith("The user's current request: count the files")
    assert budget.pending_request([Message(role="user", content=note)], []) is None  # a note is no request
    rambling = budget.note_text("the same again. " * 1000, 4096, None)  # a small model repeating itself
    assert len(rambling.encode()) < budget.SUMMARY_BYTES + 200 and rambling.endswith("bytes cut]")


def test_mm_writes_a_summary_of_requests_and_calls_when_the_model_gives_none() -> None:
    older = [Message(role="user", content="list files"), _call("a"), _tool("a\nb", "a")]
    assert budget.fallback_summary(older) == "The user asked: list files\nCalled bash {}"


def test_the_cannot_fit_error_says_what_takes_the_room_and_what_to_do() -> None:
    text = budget.cannot_fit("local/tiny", 9000, Window.of(4096, 1024), 5000)
    assert "about 9,000 tokens" in text and "context window of 4,096 tokens (1,024 kept" in text
    assert "alone take 5,000" in text
    assert "--model" in text and "fewer tools" in text and "new session" in text


def test_a_spill_marker_is_found_in_linear_time_among_lookalikes() -> None:
    # "is in " repeated without the marker's end once cost a quadratic scan each time outputs were stubbed.
    assert budget.spill_named("is in " * 50_000) is None
    marker = "is in /s/spill.log — read any range of it with read_file"
    assert budget.spill_named("is in " * 50_000 + marker).endswith("is in /s/spill.log")  # type: ignore[union-attr]
    assert budget.spill_named("x " + marker) == "/s/spill.log"
