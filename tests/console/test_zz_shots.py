from __future__ import annotations
import re
from tests.console.conftest import ANDROID, IPHONE, PHONE
from tests.console.test_console import sign_in
from tests.console.test_testers_on_phones import Shelf, shelf  # noqa: F401
from playwright.sync_api import expect

def test_shots(server, new_page, shelf: Shelf) -> None:
    phone = new_page(server, **PHONE, user_agent=IPHONE)
    sign_in(phone, "tess@example.com")
    phone.screenshot(path="/tmp/x/projects-phone.png", full_page=True)
    phone.goto(shelf.app_path)
    phone.screenshot(path="/tmp/x/app-iphone.png", full_page=True)
    phone.get_by_role("button", name="Install Example.ipa").click()
    expect(phone).to_have_url(re.compile("/install/"))
    phone.screenshot(path="/tmp/x/install-iphone.png", full_page=True)
    url = phone.url
    android = new_page(server, **PHONE, user_agent=ANDROID)
    android.goto(url)
    android.screenshot(path="/tmp/x/install-android.png", full_page=True)
