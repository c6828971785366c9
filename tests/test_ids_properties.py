"""Properties of list cursors (buildbay.ids): a cursor is an opaque string clients hand back."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from buildbay.errors import ValidationFailed
from buildbay.ids import ID_PATTERN, InvalidCursorError, decode_cursor, encode_cursor, new_id
from buildbay.schemas import MAX_CURSOR_LENGTH, page_of

ids = st.builds(new_id, st.from_regex(r"[a-z]{2,4}", fullmatch=True)) | st.from_regex(
    ID_PATTERN, fullmatch=True
)
# Near misses: ids with something around them, as `$` in a pattern lets a trailing newline by.
near_ids = st.from_regex(r"\A" + ID_PATTERN.pattern + r"\Z", fullmatch=False) | st.builds(
    "{}{}{}".format, st.text(max_size=2), ids, st.text(max_size=2)
)


@given(ids)
def test_a_cursor_gives_back_its_id(last_id: str) -> None:
    cursor = encode_cursor(last_id)

    assert decode_cursor(cursor) == last_id
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)  # URL-safe as it is: no escaping, no padding


@given(st.text() | near_ids)
@example("prj_01M8262838F28335P3AZPT5HNT\n")
def test_a_cursor_of_anything_but_an_id_is_refused(text: str) -> None:
    cursor = encode_cursor(text)

    if ID_PATTERN.fullmatch(text):
        assert decode_cursor(cursor) == text
    else:
        with pytest.raises(InvalidCursorError):
            decode_cursor(cursor)


@given(st.text() | st.text(alphabet="ABCDEFabcdef0123456789-_=+/") | ids.map(encode_cursor))
def test_any_string_decodes_to_an_id_or_is_an_invalid_cursor(cursor: str) -> None:
    try:
        value = decode_cursor(cursor)
    except InvalidCursorError:
        return
    assert ID_PATTERN.fullmatch(value)


@given(st.text(max_size=MAX_CURSOR_LENGTH + 20), st.none() | st.text(max_size=5))
def test_the_cursor_query_parameter_is_a_page_or_a_422(cursor: str, limit: str | None) -> None:
    refused: ValidationFailed | None = None
    try:
        page = page_of(limit, cursor)
    except ValidationFailed as exc:
        refused = exc
    if refused is not None:
        assert refused.code in {"invalid_cursor", "validation_error"}
        assert refused.errors is not None
        assert [e.field for e in refused.errors] in (["cursor"], ["limit"])
    else:
        assert page.after_id is None or ID_PATTERN.fullmatch(page.after_id)
        assert 1 <= page.limit <= 100
