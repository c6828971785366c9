from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oidc_provider import OidcProvider, oidc_provider_process


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """The real OpenID Connect provider, playing the CI's token service: one process a module
    (its start costs about 2 s of processor time; each test has its own server, database and
    key cache, and a test that rotates the keys leaves a provider the next reads afresh)."""
    with oidc_provider_process(tmp_path_factory.mktemp("oidc")) as running:
        yield running
