"""Whole numbers from headers, query strings and forms: ASCII digits, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildbay.numbers import whole_number


@pytest.mark.parametrize(
    ("text", "number"),
    [("0", 0), ("007", 7), ("9" * 18, int("9" * 18)), ("", None), ("-1", None), ("1.5", None),
     ("²", None), ("١٢", None), (" 1", None), ("1\n", None), ("9" * 19, None), ("9" * 5000, None)],
)  # fmt: skip
def test_a_whole_number_is_ascii_digits_and_no_more_than_18(text: str, number: int | None) -> None:
    assert whole_number(text) == number


def test_the_digits_allowed_can_be_raised_for_a_header() -> None:
    assert whole_number("1" * 20, max_digits=20) == int("1" * 20)
    assert whole_number("1" * 21, max_digits=20) is None


@given(st.text(max_size=30))
def test_any_text_is_a_number_or_none_never_an_error(text: str) -> None:
    number = whole_number(text)
    if number is not None:
        assert text.isascii()
        assert text.isdigit()
        assert number == int(text)
