"""The ReDoc page of the API (/redoc), every file of it from this server.

fastapi-offline serves ReDoc's bundle from the package, but the bundle draws the "API docs by
Redocly" logo from cdn.redoc.ly: a request to another site from every visit (refused by the
docs' Content-Security-Policy, and useless offline). The page here loads the same bundle with
that one address pointed at a logo under /static instead.
"""

from __future__ import annotations

import functools
import logging
from importlib.resources import files

from fastapi import FastAPI, Request, Response
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse

log = logging.getLogger("buildbay.api_docs")

REDOC_PATH = "/redoc"
REDOC_SCRIPT = "/redoc/redoc.standalone.js"
REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
LOCAL_LOGO = "/static/redoc-logo.svg"


@functools.cache
def _local_bundle() -> str:
    """ReDoc's bundle as fastapi-offline ships it, with its logo served from here. Read once a
    process: 1 MiB read, decoded and searched took 6 ms of the 10.6 ms an app took to build
    (measured), in each test that builds one."""
    bundle = (files("fastapi_offline") / "static" / "redoc.standalone.js").read_text("utf-8")
    if REDOCLY_LOGO not in bundle:
        # A newer bundle: the test of /redoc says whether it reaches another site.
        log.warning("ReDoc's bundle no longer names %s; /redoc serves it as it is", REDOCLY_LOGO)
    return bundle.replace(REDOCLY_LOGO, LOCAL_LOGO)


def add_redoc(app: FastAPI, title: str) -> None:
    """/redoc and its script (read once a process, the first time an app is built)."""
    bundle = _local_bundle()

    async def redoc_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{REDOC_SCRIPT}",
            redoc_favicon_url=f"{root}/static/favicon.svg",
            with_google_fonts=False,
        )

    async def redoc_script() -> Response:
        return Response(
            bundle,
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.add_api_route(REDOC_PATH, redoc_page, include_in_schema=False)
    app.add_api_route(REDOC_SCRIPT, redoc_script, include_in_schema=False)
