"""Where "Register this device" leads: the profile service's .mobileconfig, for a signed-in person
or through a personal install link (devices/routes.py serves both: REGISTER_PATH and
`/install/{token}/register-device`). The install page and the console's pages all make the
address here."""

from __future__ import annotations

from urllib.parse import quote, urlencode


def register_device_path(*, build_id: str | None = None, install_token: str | None = None) -> str:
    """`install_token`: through that personal install link (its person's device, no sign-in);
    else the signed-in person's, led back to `build_id`'s page once enrolled."""
    if install_token is not None:
        return f"/install/{quote(install_token, safe='')}/register-device"
    query = f"?{urlencode({'build': build_id})}" if build_id else ""
    return f"/devices/register.mobileconfig{query}"
