"""Message text: cc-web stores content as a string or as a list of ``{type, text}`` blocks.

``messages.content`` always holds plain text; structured content is joined here, and the
original blocks are kept in ``metadata.contentBlocks`` by whoever wrote the row.
"""

from __future__ import annotations

import json
from typing import Any

BLOCK_SEPARATOR = "\n"


def join_text_blocks(blocks: list[Any]) -> str:
    """The text of a block list: its ``text`` blocks (or bare strings) joined by newlines."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type", "text") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return BLOCK_SEPARATOR.join(parts)


def text_of(content: Any) -> str:
    """Plain text of a content value: a string as is (a JSON block list inside it is joined)."""
    if isinstance(content, list):
        return join_text_blocks(content)
    if not isinstance(content, str):
        return "" if content is None else str(content)
    if content.startswith("[{") and content.endswith("}]"):
        try:
            parsed = json.loads(content)
        except ValueError:
            return content
        if isinstance(parsed, list) and all(isinstance(b, dict) and "type" in b for b in parsed):
            return join_text_blocks(parsed)
    return content
