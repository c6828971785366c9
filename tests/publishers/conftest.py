from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.oidc_provider import OidcProvider, oidc_provider_process


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    """The real OpenID Connect provider, playing the CI's token service."""
    with oidc_provider_process(tmp_path) as running:
        yield running
