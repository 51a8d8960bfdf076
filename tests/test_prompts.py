"""The prompt texts of SPEC §4: what the target and the source are told."""

from __future__ import annotations

import pytest

from ccweb_store.domain.prompts import (
    LEGACY_ORIGINAL_REQUEST,
    ONE_WAY,
    RETURN_AND_CONTINUE,
    failure_notice,
    source_auto_run_prompt,
    target_prompt,
)


def test_one_way_target_prompt_says_the_output_will_not_be_returned() -> None:
    text = target_prompt(
        source_id="conv-a",
        source_title="Planner",
        content="FYI: deploy is done",
        reply_mode=ONE_WAY,
    )
    assert "Planner" in text
    assert "conv-a" in text
    assert "FYI: deploy is done" in text
    assert "will NOT be returned to the source" in text
    assert "Reply request id" not in text


def test_return_and_continue_target_prompt_holds_request_id_and_forbids_a_manual_reply() -> None:
    text = target_prompt(
        source_id="conv-a",
        source_title="Planner",
        content="Run the tests and report",
        reply_mode=RETURN_AND_CONTINUE,
        request_id="req_123",
    )
    assert "Planner" in text and "conv-a" in text
    assert "Run the tests and report" in text
    assert "req_123" in text
    assert "automatically returns the final output of this turn" in text
    assert "finish the work first" in text and "clearly blocked" in text
    assert "Do NOT call ccweb_send_message" in text
    assert "would duplicate it" in text
    assert "will NOT be returned" not in text


def test_return_and_continue_target_prompt_needs_a_request_id() -> None:
    with pytest.raises(ValueError, match="request id"):
        target_prompt(source_id="a", source_title=None, content="x", reply_mode=RETURN_AND_CONTINUE)


def test_target_prompt_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown reply mode"):
        target_prompt(source_id="a", source_title="A", content="x", reply_mode="sync")


def test_untitled_source_is_named_by_its_id() -> None:
    text = target_prompt(source_id="conv-z", source_title=None, content="hi", reply_mode=ONE_WAY)
    assert "untitled conversation conv-z" in text


def test_source_auto_run_prompt_holds_every_link_and_the_completeness_instruction() -> None:
    text = source_auto_run_prompt(
        request_id="req_9",
        target_id="conv-b",
        target_title="Tester",
        original_request="Run the full suite",
        reply_text="All 120 tests pass",
    )
    for expected in ("req_9", "conv-b", "Tester", "Run the full suite", "All 120 tests pass"):
        assert expected in text
    assert "judge whether the reply fully satisfies the original request" in text
    assert "returned is not the same as done" in text
    assert "follow up" in text and "finish the work yourself" in text


def test_source_auto_run_prompt_uses_a_clear_placeholder_for_legacy_rows() -> None:
    text = source_auto_run_prompt(
        request_id="req_old",
        target_id="conv-b",
        target_title="Tester",
        original_request=None,
        reply_text="done",
    )
    assert LEGACY_ORIGINAL_REQUEST in text
    assert "was not recorded" in text


def test_source_auto_run_prompt_marks_an_empty_reply() -> None:
    text = source_auto_run_prompt(
        request_id="r", target_id="t", target_title="T", original_request="x", reply_text="  "
    )
    assert "finished without any output" in text


def test_failure_notice_names_the_request_the_reason_and_what_to_do() -> None:
    text = failure_notice(
        request_id="req_f",
        target_id="conv-b",
        target_title="Tester",
        original_request="Fix the build",
        error="the target crashed",
    )
    for expected in ("req_f", "conv-b", "Tester", "Fix the build", "the target crashed"):
        assert expected in text
    assert "No reply will arrive" in text
