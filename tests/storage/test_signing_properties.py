"""Properties of signed storage URLs (buildbay.storage.signing, and the storage routes' reading
of a URL's query): the URL is the credential, so any change to it is refused, and no query,
however odd, gets anything but that refusal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from buildbay.errors import Forbidden
from buildbay.files.routes import _number
from buildbay.storage.signing import UrlSigner

NOW = datetime(2026, 11, 22, 4, 19, 53, tzinfo=UTC)
signer = UrlSigner(b"a-master-key-for-the-property-tests-0123456789")

methods = st.sampled_from(["PUT", "GET"])
keys = st.text(min_size=1, max_size=200)
sizes = st.none() | st.integers(min_value=1, max_value=2**53)
future = st.integers(min_value=1, max_value=10**7).map(lambda s: int(NOW.timestamp()) + s)


def verify(method: str, key: str, expires: int, signature: str, size: int | None) -> None:
    signer.verify(method, key, expires, signature, NOW, size)


@given(methods, keys, future, sizes)
def test_a_signed_url_verifies_until_it_expires(
    method: str, key: str, expires: int, size: int | None
) -> None:
    signature = signer.sign(method, key, expires, size)

    verify(method, key, expires, signature, size)
    later = datetime.fromtimestamp(expires, UTC) + timedelta(seconds=1)
    with pytest.raises(Forbidden) as refused:
        signer.verify(method, key, expires, signature, later, size)
    assert refused.value.code == "url_expired"


@given(methods, keys, future, sizes, st.data())
def test_any_change_to_a_signed_url_is_refused(
    method: str, key: str, expires: int, size: int | None, data: st.DataObject
) -> None:
    signature = signer.sign(method, key, expires, size)
    changed = {"method": method, "key": key, "expires": expires, "signature": signature}
    changed["size"] = size
    part = data.draw(st.sampled_from(["method", "key", "expires", "signature", "size"]))
    if part == "method":
        changed[part] = "GET" if method == "PUT" else "PUT"
    elif part == "key":
        changed[part] = data.draw(keys.filter(lambda k: k != key))
    elif part == "expires":
        changed[part] = data.draw(future.filter(lambda e: e != expires))
    elif part == "size":
        changed[part] = data.draw(sizes.filter(lambda s: s != size))
    else:
        changed[part] = data.draw(st.text(max_size=80).filter(lambda s: s != signature))

    with pytest.raises(Forbidden) as refused:
        verify(
            str(changed["method"]),
            str(changed["key"]),
            int(changed["expires"]),  # type: ignore[call-overload]
            str(changed["signature"]),
            changed["size"],  # type: ignore[arg-type]
        )
    assert refused.value.code == "invalid_signature"


def read_signed_query(method: str, key: str, query: str) -> None:
    """What the storage address does with a URL's query before it looks at anything else."""
    parts = dict(parse_qsl(query, keep_blank_values=True))
    size = _number(parts.get("size")) if method == "PUT" else None
    verify(method, key, _number(parts.get("expires")), parts.get("signature") or "", size)


query_values = st.text() | st.from_regex(r"[0-9]{1,20}", fullmatch=True)
queries = (
    st.dictionaries(
        st.sampled_from(["size", "expires", "signature", "name"]) | st.text(max_size=5),
        query_values,
    ).map(urlencode)
    | st.text()
)


@given(methods, keys, queries)
@example("PUT", "a/b/c", "size=%C2%B2&expires=1&signature=00")  # "²".isdigit() is true
@example("GET", "a/b/c", "expires=99999999999&signature=%C3%A9")  # not ASCII
def test_any_query_is_refused_with_the_documented_error_only(
    method: str, key: str, query: str
) -> None:
    with pytest.raises(Forbidden) as refused:
        read_signed_query(method, key, query)
    assert refused.value.code in {"invalid_signature", "url_expired"}


@given(keys, future, st.integers(min_value=1, max_value=2**53))
def test_the_query_of_a_signed_url_reads_back(key: str, expires: int, size: int) -> None:
    signature = signer.sign("PUT", key, expires, size)
    query = urlencode({"size": size, "expires": expires, "signature": signature})
    assume(len(str(size)) <= 16)

    read_signed_query("PUT", key, query)
