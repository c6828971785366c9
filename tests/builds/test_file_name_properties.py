"""Properties of the upload's `fileName` rules (buildbay.builds.schemas): the server takes
exactly the names the OpenAPI document allows, and what it keeps is never a path."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from buildbay.builds.schemas import UploadLinkRequest
from buildbay.schemas import WHITESPACE

# Control characters (Cc), line and paragraph separators, bidirectional overrides and isolates,
# and the characters that show nothing (the zero-width space, bidi marks, the byte order mark;
# not the zero-width (non-)joiners that words and emoji need, though a name of only those is
# blank).
_CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    r"\u00ad\u061c\u180e\u200b\u200e\u200f\u2060-\u2064\ufeff]"
)
_JOINERS = "\u200c\u200d"
# The document's schema of the field, as clients (and schemathesis) read it.
FILE_NAME_SCHEMA = UploadLinkRequest.model_json_schema(by_alias=True)["properties"]["fileName"]
document_allows = jsonschema_rs.validator_for(FILE_NAME_SCHEMA).is_valid

names = (
    st.text(max_size=300)
    | st.text(
        alphabet=" ./\\\t\n\x00\x7f\x85\u2028\u202e\u3000\u200f\ufeff\u200b\u200da", max_size=6
    )
    | st.builds(
        "{}{}{}".format,
        st.text(alphabet=WHITESPACE, max_size=3),
        st.sampled_from([".", "..", "...", "a.apk", "a/b", "a\\b", "\x1f", "アプリ.ipa"]),
        st.text(alphabet=WHITESPACE, max_size=3),
    )
)


def server_takes(name: str) -> str | None:
    try:
        return UploadLinkRequest.model_validate({"fileName": name, "fileSize": 1}).file_name
    except ValidationError:
        return None


def contract_allows(name: str) -> bool:
    """The contract, in words: 1..255 characters, no `/`, `\\`, NUL, control characters, line
    separators, bidirectional overrides or invisible characters, not `.` or `..` (and, trimmed
    as every name is, not blank)."""
    trimmed = name.strip(WHITESPACE)
    return (
        1 <= len(name) <= 255
        and not ({"/", "\\"} & set(name))
        and not _CONTROL.search(name)
        and trimmed not in {"", ".", ".."}
        and any(c not in WHITESPACE + _JOINERS for c in name)
    )


@given(names)
@example(" .. ")
@example("\u3000")
@example("app.apk\n")
@example("app\u200f.apk")
@example("\ufeffapp.apk")
@example("a" * 255 + " ")
def test_the_server_takes_exactly_the_names_the_document_allows(name: str) -> None:
    taken = server_takes(name)

    assert (taken is not None) == document_allows(name) == contract_allows(name), name


@given(names)
def test_a_name_taken_is_trimmed_and_is_never_a_path(name: str) -> None:
    taken = server_takes(name)
    if taken is None:
        return

    assert taken == name.strip(WHITESPACE)
    assert taken not in {".", ".."}
    assert not ({"/", "\\"} & set(taken))
    assert not _CONTROL.search(taken)
    assert 1 <= len(taken) <= 255


@pytest.mark.parametrize(
    "body", [{"fileName": None, "fileSize": 1}, {"fileName": 7, "fileSize": 1}, {"fileSize": 1}]
)
def test_a_name_that_is_not_a_string_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        UploadLinkRequest.model_validate(body)
