"""The security headers of every response: a Content-Security-Policy, no framing, no sniffing, no
referrer to other sites; and for the API, no cache (the console's and install pages' own say so
too: buildbay.templates).

One policy for every page Buildbay writes (the console, the install pages, errors): scripts and
styles only from this server's /static files, so nothing a user typed can ever run as script;
and one for the interactive API docs, whose Swagger UI and ReDoc pages start with an inline
script of FastAPI's own. API JSON and storage bytes get the strict one too: a response that is
not a page is never a document to run anything in.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from buildbay.config import Settings, StorageKind

# FastAPI's interactive docs (fastapi-offline serves their files from /static-offline-docs).
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})


def _storage_origin(settings: Settings) -> str | None:
    """Where the console's browser upload sends the bytes, when that is not this server: the
    S3-compatible endpoint (path-style URLs), or AWS's S3 hosts."""
    if settings.storage is not StorageKind.S3:
        return None
    if settings.s3_endpoint_url:
        parts = urlsplit(settings.s3_endpoint_url)
        return f"{parts.scheme}://{parts.netloc}"
    return "https://*.amazonaws.com"


def _policy(**directives: str) -> str:
    return "; ".join(f"{name.replace('_', '-')} {value}" for name, value in directives.items())


class SecurityHeaders:
    """The headers for a response to a path, built once from the settings."""

    def __init__(self, settings: Settings) -> None:
        connect = " ".join(filter(None, ["'self'", _storage_origin(settings)]))
        common = {
            "object_src": "'none'",
            "base_uri": "'none'",
            "frame_ancestors": "'none'",
            "form_action": "'self'",
        }
        self._page_directives = {
            "default_src": "'none'",
            "script_src": "'self'",
            "style_src": "'self'",
            "img_src": "'self'",
            "connect_src": connect,
            **common,
        }
        pages = _policy(**self._page_directives)
        # Swagger UI and ReDoc are started by an inline script FastAPI writes, and style
        # themselves inline; ReDoc also runs a worker from a blob: URL and shows data: images.
        docs = _policy(
            default_src="'self'",
            script_src="'self' 'unsafe-inline'",
            style_src="'self' 'unsafe-inline'",
            img_src="'self' data:",
            worker_src="'self' blob:",
            connect_src="'self'",
            **common,
        )
        shared = [
            ("X-Frame-Options", "DENY"),
            ("X-Content-Type-Options", "nosniff"),
            # Not no-referrer: with it a browser sends `Origin: null` on the console's own form
            # posts, which the console's CSRF check refuses. same-origin sends nothing to other
            # sites (an install page's address holds its token) and keeps the console working.
            ("Referrer-Policy", "same-origin"),
        ]
        self._pages = [("Content-Security-Policy", pages), *shared]
        self._docs = [("Content-Security-Policy", docs), *shared]
        # An API answer is the caller's own, and some hand out a secret (a login's tokens, a
        # new API token, a webhook's signing secret): no cache keeps one, unless the route
        # says otherwise (the update check's answers are public for a minute).
        self._api = [*self._pages, ("Cache-Control", "no-store")]

    def page_policy(self, *, form_targets: tuple[str, ...] = ()) -> str:
        """The pages' policy, its forms also allowed to go (or be redirected) to these
        origins (the command line's loopback sign-in: console/cli_sign_in.py)."""
        form_action = " ".join(["'self'", *form_targets])
        return _policy(**{**self._page_directives, "form_action": form_action})

    def for_path(self, path: str) -> list[tuple[str, str]]:
        """Each is set unless the response has its own."""
        if path.startswith("/api/"):
            return self._api
        return self._docs if path in DOCS_PATHS else self._pages
