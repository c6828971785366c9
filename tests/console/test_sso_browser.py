"""Signing in with the company's identity provider in a real browser (issue 41): the sign-in
page's "Sign in with ..." button, the provider's own form (oidc-provider-mock's, in its own
process), and back to the console, signed in; a cancel at the provider is a sentence on the
sign-in page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.oidc_provider import OidcProvider, oidc_provider_process

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    with oidc_provider_process(tmp_path) as running:
        yield running


@pytest.fixture
def server_env(server_env: dict[str, str], provider: OidcProvider) -> dict[str, str]:
    return server_env | {
        "BUILDBAY_OIDC_ISSUER": provider.issuer,
        "BUILDBAY_OIDC_CLIENT_ID": "buildbay-console",
        "BUILDBAY_OIDC_CLIENT_SECRET": "a-client-secret",
        "BUILDBAY_OIDC_PROVIDER_NAME": "Acme ID",
    }


def test_a_person_signs_in_through_the_providers_form_and_lands_signed_in(
    server: str, new_page: NewPage, provider: OidcProvider
) -> None:
    provider.set_user("pia-1", email="pia@example.com", email_verified=True, name="Pia Sso")
    page = new_page(server)
    page.goto("/login")
    page.get_by_role("link", name="Sign in with Acme ID").click()
    expect(page).to_have_url(re.compile(re.escape(provider.issuer) + "/oauth2/authorize"))
    page.get_by_placeholder("sub").fill("pia-1")
    page.get_by_role("button", name="Authorize").click()
    expect(page).to_have_url(re.compile(re.escape(server) + "/projects"))
    page.goto("/account")
    expect(page.locator("main")).to_contain_text("pia@example.com")
    expect(page.locator("main")).to_contain_text("Pia Sso")

    # Cancelled at the provider: back at the sign-in page, with a sentence.
    other = new_page(server)
    other.goto("/signup")
    other.get_by_role("link", name="Sign in with Acme ID").click()
    other.get_by_role("button", name="Deny").click()
    expect(other).to_have_url(re.compile(re.escape(server) + "/login"))
    expect(other.locator(".notice")).to_contain_text("The sign-in was cancelled at Acme ID")
