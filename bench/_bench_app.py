"""`buildbay serve`, with two bench endpoints added, for same-process baselines.

`python bench/_bench_app.py serve --port N` runs the real command (`buildbay`, whose `serve` is
src/buildbay/cli.py's), so the server has exactly the uvicorn options of `buildbay serve`
(uvloop, httptools, its access log settings, ...); only the application it builds gains
`GET /bench/bare` (bench/api.py), `PUT /bench/sink` (bench/upload.py) and `GET /bench/file`
(bench/feeds_download.py).
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse

import buildbay.app
from buildbay_client.cli import main

_create_app = buildbay.app.create_app


def create_app_with_bench_routes(*args: Any, **kwargs: Any) -> FastAPI:
    app = _create_app(*args, **kwargs)

    @app.get("/bench/bare", include_in_schema=False)
    async def bare() -> dict[str, list[object]]:
        """What uvicorn, FastAPI and the app's middleware cost with no auth, database or model."""
        return {"projects": []}

    @app.put("/bench/sink", include_in_schema=False)
    async def sink(request: Request) -> dict[str, int]:
        """The server's HTTP ceiling for a PUT: the body is read and dropped, nothing else."""
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return {"size": size}

    @app.get("/bench/file", include_in_schema=False)
    async def file() -> FileResponse:
        """A bare Starlette FileResponse of the file BUILDBAY_BENCH_FILE names (with its Range
        support): the baseline of bench/feeds_download.py."""
        return FileResponse(
            os.environ["BUILDBAY_BENCH_FILE"], media_type="application/octet-stream"
        )

    # Routing costs something for each route passed over: the bench routes sit just before
    # `GET /api/projects`, so the baseline passes over exactly the routes the measured endpoint
    # does (appended at the end it would pass over all of them, first over none: neither fair).
    routes = app.router.routes
    bench = [routes.pop(), routes.pop(), routes.pop()]
    at = next(
        i for i, r in enumerate(routes)
        if getattr(r, "path", None) == "/api/projects" and "GET" in getattr(r, "methods", ())
    )  # fmt: skip
    routes[at:at] = bench
    return app


if __name__ == "__main__":
    # `serve` imports create_app from buildbay.app when it runs, so it picks this one up.
    buildbay.app.create_app = create_app_with_bench_routes
    main()
