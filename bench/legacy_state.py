"""A synthetic cc-web JSON state (SPEC §6) for the import benchmark and the import crash test.

Sessions of string and block content, with and without message ids, epoch-millisecond
timestamps, extra keys; one reply state per session but the first. With ``every_reply_state``
the replies cover what the importer treats specially: every status (``pending`` too), entries
without ``createdAt`` (the column default: the import time), without ``originalRequest`` (found
again in the target's message that carried the request), failures without ``returnedAt``
(settled by the import), and unknown keys.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "agents",
    "trade",
    "work",
    "across",
    "chats",
]
START_MS = 1_700_000_000_000
REPLY_STATUSES = ("pending", "waiting", "ready", "returned", "failed")


def generate_state(
    root: Path, sessions: int, messages: int, *, every_reply_state: bool = False
) -> int:
    """Write ``sessions`` files of ``messages`` messages each; return the message count."""
    (root / "sessions").mkdir(parents=True)
    (root / "config").mkdir()
    replies = []
    for s in range(sessions):
        session_id = f"bench-{s:05d}"
        rows: list[dict[str, Any]] = []
        for m in range(messages):
            text = " ".join(WORDS[(s + m + i) % len(WORDS)] for i in range(30))
            row: dict[str, Any] = {"role": "user" if m % 2 == 0 else "assistant"}
            if m % 4 == 1:
                row["content"] = [{"type": "text", "text": text}, {"type": "text", "text": "ok"}]
            else:
                row["content"] = text
            if m % 5:
                row["id"] = f"{session_id}-{m}"
            row["timestamp"] = START_MS + s * 10_000_000 + m * 1000
            if m % 10 == 0:
                row["model"] = "claude-sonnet"
            rows.append(row)
        if every_reply_state and s and rows:
            # The target's message that carried the request, as cc-web marks it.
            rows[0]["metadata"] = {"crossConversation": {"replyRequestId": f"req-{s}"}}
        document = {
            "id": session_id,
            "title": f"Session {s}",
            "createdAt": "2023-11-14T22:13:20.000Z",
            "claudeSessionId": str(uuid.UUID(int=s)),
            "messages": rows,
        }
        (root / "sessions" / f"{session_id}.json").write_text(json.dumps(document))
        if s:
            replies.append(_reply(s, session_id, every_reply_state))
    (root / "config" / "cross-conversation-replies.json").write_text(json.dumps(replies))
    return sessions * messages


def _reply(s: int, target: str, varied: bool) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "requestId": f"req-{s}",
        "sourceConversationId": "bench-00000",
        "targetConversationId": target,
        "status": "returned",
        "createdAt": START_MS + s,
    }
    if not varied:
        return reply
    status = REPLY_STATUSES[s % len(REPLY_STATUSES)]
    reply["status"] = status
    reply["hopCount"] = 1 + s % 3
    reply["sourceTitle"] = "Session 0"
    if s % 3:
        reply["originalRequest"] = f"please do task {s}"
    if s % 7 == 0:
        del reply["createdAt"]
    if status in ("ready", "returned", "failed") and s % 4:
        reply["completedAt"] = START_MS + s + 5000
        reply["replyText"] = f"task {s} done"
    if status == "returned":
        reply["returnedAt"] = START_MS + s + 6000
    if status == "failed":
        reply["lastError"] = "the agent crashed"
    if s % 11 == 0:
        reply["threadId"] = f"thread-{s}"  # a key no column maps
    return reply
