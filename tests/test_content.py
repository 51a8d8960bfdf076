from ccweb_store.domain.content import join_text_blocks, text_of


def test_text_blocks_are_joined_and_other_blocks_ignored() -> None:
    blocks = [
        {"type": "text", "text": "a"},
        {"type": "image", "url": "x"},
        {"type": "text", "text": "b"},
    ]
    assert join_text_blocks(blocks) == "a\nb"


def test_plain_strings_pass_through_unchanged() -> None:
    assert text_of("hello [{not json}]") == "hello [{not json}]"


def test_a_json_block_list_stored_as_text_reads_as_its_text() -> None:
    assert text_of('[{"type": "text", "text": "hi"}]') == "hi"


def test_none_is_empty_text() -> None:
    assert text_of(None) == ""
