"""Properties of the local store's signed URLs, end to end through the code that serves them: a URL
made by LocalStorage (upload_target, part_target, download_url) is matched by the storage
address's own router, read by the route's own reading of it (files/routes.py), and checked by the
UrlSigner. The URL is the credential, so it is accepted for exactly what it was signed for, until
it expires on the (injected) clock, and any change to it is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.datastructures import QueryParams
from starlette.routing import Match

from buildbay.clock import FrozenClock
from buildbay.errors import Forbidden
from buildbay.files import routes
from buildbay.storage.local import LocalStorage
from buildbay.storage.signing import UrlSigner
from tests.conftest import BASE_URL

NOW = datetime(2026, 11, 22, 4, 19, 53, tzinfo=UTC)
signer = UrlSigner(b"a-master-key-for-the-property-tests-0123456789")
# The route's reading of each address's URL (what the route calls first, with the request's
# query and the app's clock).
READERS: dict[Callable[..., Any], Callable[..., object]] = {
    routes.receive_upload: routes.read_upload_url,
    routes.receive_part: routes.read_part_url,
    routes.serve_file: routes.read_download_url,
}

# Anything a key or a file name may hold, but control characters (a path holds none).
text = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))
keys = st.text(text, min_size=1, max_size=120)
names = st.text(text, max_size=40)
sizes = st.integers(min_value=1, max_value=10**15)
parts = st.integers(min_value=1, max_value=10_000)
lifetimes = st.integers(min_value=1, max_value=10**7)  # seconds a URL is valid for
kinds = st.sampled_from(["upload", "part", "download"])


class NotRouted(Exception):
    """No route of the storage address takes this method on this path (a 404 or a 405)."""


@dataclass(frozen=True)
class Signed:
    """A URL the store signed, with what it was signed for."""

    method: str
    url: str
    grants: object  # what the route's reading of the URL must return


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LocalStorage:
    root: Path = tmp_path_factory.mktemp("signed-urls")
    return LocalStorage(root, BASE_URL, signer)


def signed(
    store: LocalStorage, kind: str, key: str, size: int, part: int, name: str, lifetime: int
) -> Signed:
    expires_at = NOW + timedelta(seconds=lifetime)
    if kind == "upload":
        target = asyncio.run(store.upload_target(key, size, expires_at, None))
        return Signed("PUT", target.url, size)
    if kind == "part":
        target = asyncio.run(store.part_target(key, "an-upload", part, size, expires_at))
        return Signed("PUT", target.url, (part, size))
    return Signed("GET", asyncio.run(store.download_url(key, name, expires_at)), name)


def accepted(method: str, url: str, now: datetime) -> object:
    """What the storage address grants `method` on `url` at `now`: its router picks the route
    (and the key, from the path as the server decodes it), the route's reading of the URL
    checks it. Raises Forbidden as the route would, or NotRouted."""
    split = urlsplit(url)
    scope = {"type": "http", "method": method, "path": unquote(split.path), "root_path": ""}
    for route in routes.router.routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            endpoint = getattr(route, "endpoint", None)
            read = READERS[endpoint]
            return read(signer, child["path_params"]["key"], QueryParams(split.query), now)
    raise NotRouted(f"{method} {split.path}")


def refusal(method: str, url: str, now: datetime = NOW) -> str:
    with pytest.raises(Forbidden) as refused:
        accepted(method, url, now)
    return refused.value.code


def with_query(url: str, change: Callable[[dict[str, str]], Mapping[str, str]]) -> str:
    split = urlsplit(url)
    query = change(dict(parse_qsl(split.query, keep_blank_values=True)))
    return urlunsplit(split._replace(query=urlencode(query)))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds, keys, sizes, parts, names, lifetimes, st.data())
def test_a_signed_url_grants_what_it_was_signed_for_until_it_expires(
    store: LocalStorage,
    kind: str,
    key: str,
    size: int,
    part: int,
    name: str,
    lifetime: int,
    data: st.DataObject,
) -> None:
    url = signed(store, kind, key, size, part, name, lifetime)
    valid, expired = FrozenClock(NOW), FrozenClock(NOW)
    expired.advance(seconds=lifetime)  # the very moment it expires

    assert accepted(url.method, url.url, valid.now()) == url.grants
    valid.advance(microseconds=data.draw(st.integers(min_value=0, max_value=lifetime * 10**6 - 1)))
    assert accepted(url.method, url.url, valid.now()) == url.grants
    assert refusal(url.method, url.url, expired.now()) == "url_expired"
    expired.advance(seconds=data.draw(st.integers(min_value=0, max_value=10**8)))
    assert refusal(url.method, url.url, expired.now()) == "url_expired"


def other(strategy: st.SearchStrategy[Any], than: object) -> st.SearchStrategy[Any]:
    return strategy.filter(lambda value: value != than)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds, keys, sizes, parts, names, lifetimes, st.data())
def test_any_change_to_a_signed_url_is_refused(
    store: LocalStorage,
    kind: str,
    key: str,
    size: int,
    part: int,
    name: str,
    lifetime: int,
    data: st.DataObject,
) -> None:
    url = signed(store, kind, key, size, part, name, lifetime)
    split = urlsplit(url.url)
    method = url.method
    signed_for = {"upload": ["size"], "part": ["part", "size"], "download": ["name"]}[kind]
    change = data.draw(st.sampled_from(["key", "address", "expires", "signature", *signed_for]))

    if change == "key":  # the same query on another object's path
        elsewhere = signed(store, kind, data.draw(other(keys, key)), size, part, name, lifetime)
        changed = urlunsplit(urlsplit(elsewhere.url)._replace(query=split.query))
    elif change == "address":  # the same key and query, sent to another address (and method)
        method, address = data.draw(
            st.sampled_from(
                [
                    (m, a)
                    for m, a in [
                        ("PUT", routes.UPLOAD_PATH),
                        ("PUT", routes.PART_PATH),
                        ("GET", routes.DOWNLOAD_PATH),
                    ]
                    if not split.path.startswith(a)
                ]
            )
        )
        path = address + split.path.split("/", 3)[3]
        changed = urlunsplit(split._replace(path=path))
    elif change == "signature":  # one character of it changed, or its length
        signature = dict(parse_qsl(split.query))["signature"]
        at = data.draw(st.integers(min_value=0, max_value=len(signature) - 1))
        new = data.draw(
            st.sampled_from(
                [
                    signature[:at] + c + signature[at + 1 :]
                    for c in "0123456789abcdefABCDEF"
                    if c != signature[at]
                ]
                + [signature[:at], signature + "0"]
            )
        )
        changed = with_query(url.url, lambda q: q | {"signature": new})
    else:
        value: object = {
            "expires": lambda: data.draw(other(lifetimes, lifetime)) + int(NOW.timestamp()),
            "size": lambda: data.draw(other(sizes, size)),
            "part": lambda: data.draw(other(parts, part)),
            "name": lambda: data.draw(other(names, name)),
        }[change]()
        changed = with_query(url.url, lambda q: q | {change: str(value)})

    assert refusal(method, changed) == "invalid_signature"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds, keys, sizes, parts, names, lifetimes)
def test_a_url_signed_with_another_key_is_refused(
    store: LocalStorage, kind: str, key: str, size: int, part: int, name: str, lifetime: int
) -> None:
    url = signed(store, kind, key, size, part, name, lifetime)
    forger = LocalStorage(store.root, BASE_URL, UrlSigner(b"another-master-key-0123456789abcdef"))
    forged = signed(forger, kind, key, size, part, name, lifetime)
    assert urlsplit(forged.url)._replace(query="") == urlsplit(url.url)._replace(query="")

    assert refusal(forged.method, forged.url) == "invalid_signature"


@given(st.sampled_from(["PUT", "GET"]), keys, sizes, lifetimes)
def test_a_signature_is_bound_to_its_method(
    method: str, resource: str, size: int, lifetime: int
) -> None:
    expires = int(NOW.timestamp()) + lifetime
    signature = signer.sign(method, resource, expires, size)
    signer.verify(method, resource, expires, signature, NOW, size)

    with pytest.raises(Forbidden) as refused:
        signer.verify("GET" if method == "PUT" else "PUT", resource, expires, signature, NOW, size)
    assert refused.value.code == "invalid_signature"


query_values = st.text() | st.from_regex(r"[0-9]{1,20}", fullmatch=True)
queries = (
    st.dictionaries(
        st.sampled_from(["part", "size", "expires", "signature", "name"]) | st.text(max_size=5),
        query_values,
    ).map(urlencode)
    | st.text()
)
addresses = st.sampled_from(
    [("PUT", routes.UPLOAD_PATH), ("PUT", routes.PART_PATH), ("GET", routes.DOWNLOAD_PATH)]
)


@given(addresses, keys, queries)
@example(("PUT", routes.UPLOAD_PATH), "a/b/c", "size=%C2%B2&expires=1&signature=00")  # "²"
@example(("GET", routes.DOWNLOAD_PATH), "a/b/c", "expires=99999999999&signature=%C3%A9")
@example(("PUT", routes.PART_PATH), "a/b/c", "part=1&size=1&expires=1" + "1" * 20)
def test_a_query_the_store_did_not_sign_is_refused_as_an_invalid_signature(
    address: tuple[str, str], key: str, query: str
) -> None:
    method, path = address
    url = urlunsplit(("http", "testserver", path + quote(key), query, ""))

    assert refusal(method, url) == "invalid_signature"
