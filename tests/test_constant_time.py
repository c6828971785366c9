"""buildbay.constant_time: the one comparison of secrets, for any text; and no other."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from buildbay.auth.tokens import hash_token
from buildbay.constant_time import same_secret, secret_bytes

ANY_TEXT = st.text(st.characters(exclude_categories=()))  # lone surrogates too
SRC = Path(__file__).resolve().parents[1] / "src" / "buildbay"


@given(ANY_TEXT, ANY_TEXT)
@example("abc", "abc")
@example("abé", "abc")
@example("\udc80", "\udc81")
def test_two_secrets_are_the_same_exactly_when_their_text_is(given_: str, expected: str) -> None:
    assert same_secret(given_, expected) is (given_ == expected)
    assert same_secret(given_, given_)


@given(ANY_TEXT, ANY_TEXT)
def test_distinct_text_hashes_apart(a: str, b: str) -> None:
    assert (secret_bytes(a) == secret_bytes(b)) is (a == b)
    assert (hash_token(a) == hash_token(b)) is (a == b)


def test_no_module_compares_a_secret_any_other_way() -> None:
    """`hmac.compare_digest` on text raises TypeError for a non-ASCII character (a 500):
    secrets are compared by `same_secret` only."""
    callers = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"compare_digest", path.read_text())
    )
    assert callers == ["constant_time.py"]
