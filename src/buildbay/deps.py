"""The request's parts as FastAPI dependencies (its context, unit of work and reads), the route
class that ends them, and the `Annotated` aliases routes use."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import attach_origin
from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.db.reads import Reads
from buildbay.problems import JSON_NOT_UTF8, JSON_NUMBER_TOO_LONG, JSON_TOO_DEEP
from buildbay.schemas import PageParams, page_of


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


async def _context(request: Request) -> AppContext:
    # Dependencies that do not block are `async def`: FastAPI runs a plain `def` dependency in a
    # worker thread, a thread round trip per request.
    return get_context(request)


S = TypeVar("S")

_SESSION = "buildbay.session"
_READS = "buildbay.reads"


class JsonBodyRequest(Request):
    """A request whose body, read as JSON, fails only as JSON does: a body that nests too deeply,
    is not UTF-8 or holds a number Python will not convert raises JSONDecodeError like any other
    malformed body (FastAPI answers that with its `json_invalid` validation error, our 400
    `malformed_json`), instead of the bare 400 FastAPI gives any other exception."""

    async def json(self) -> Any:
        body = await self.body()
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            raise
        except RecursionError:
            reason = JSON_TOO_DEEP
        except UnicodeDecodeError:
            reason = JSON_NOT_UTF8
        except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
            reason = JSON_NUMBER_TOO_LONG
        raise json.JSONDecodeError(reason, "", 0) from None


class TransactionRoute(APIRoute):
    """A route whose request session (SessionDep) commits once the response is built, before it
    is sent, so a client never sees success for a write that did not land; any error rolls it
    back (unless the error says the writes before it stand: `keeps_writes`). The read-only
    reads (ReadsDep) give their connection back. Every router of the API uses this class
    (tests/db/test_request_transactions.py checks it).

    A route class rather than a generator dependency: FastAPI runs a generator dependency
    through context managers and an exit stack, which cost more on every request than the
    session itself when the request only reads.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run_in_transaction(request: Request) -> Response:
            request = JsonBodyRequest(request.scope, request.receive)
            scope = request.scope
            scope[_SESSION] = scope[_READS] = None  # created on first use
            try:
                response = await handler(request)
            except BaseException as exc:
                await _end(scope, ok=getattr(exc, "keeps_writes", False))
                raise
            await _end(scope, ok=True)
            return response

        return run_in_transaction


async def _end(scope: MutableMapping[str, Any], *, ok: bool) -> None:
    reads: Reads | None = scope.pop(_READS, None)
    try:
        if (session := scope.pop(_SESSION, None)) is not None:
            await finish(session, ok=ok)
    finally:
        if reads is not None:
            await reads.close()


def request_session(request: Request) -> AsyncSession:
    """The request's unit of work, created on first use; TransactionRoute commits it."""
    scope = request.scope
    session: AsyncSession | None = scope.get(_SESSION)
    if session is None:
        _require_transaction_route(scope, _SESSION)
        session = scope[_SESSION] = get_context(request).sessions()
        # Where the request's changes come from, for the audit entries it may record.
        client = request.client
        attach_origin(session, client.host if client else None, request.headers.get("user-agent"))
    return session


def request_reads(request: Request) -> Reads:
    """The request's read-only reads, created on first use; TransactionRoute ends them."""
    scope = request.scope
    reads: Reads | None = scope.get(_READS)
    if reads is None:
        _require_transaction_route(scope, _READS)
        reads = scope[_READS] = Reads.on(get_context(request).read_engine)
    return reads


def _require_transaction_route(scope: MutableMapping[str, Any], key: str) -> None:
    if key not in scope:
        raise RuntimeError(f"{scope['path']}: a session needs a TransactionRoute")


async def get_session(request: Request) -> AsyncSession:
    return request_session(request)


async def get_reads(request: Request) -> Reads:
    return request_reads(request)


Context = Annotated[AppContext, Depends(_context)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]  # a unit of work: it writes
ReadsDep = Annotated[Reads, Depends(get_reads)]  # the route only reads


# A service as a dependency: `Annotated[BuildService, in_unit_of_work(build_service)]`, with the
# factory of its domain's dependencies.py. One dependency, which takes the context and the
# session or reads from the request itself: declared as `Context` and `SessionDep` of its own,
# each would be one dependency more, which FastAPI solves anew on every request
# (docs/performance.md).


def in_unit_of_work(make: Callable[[AppContext, AsyncSession], S]) -> Any:
    """`Depends` on `make(context, session)`, on the request's unit of work (it writes)."""

    async def service(request: Request) -> S:
        return make(get_context(request), request_session(request))

    return Depends(service)


def on_reads(make: Callable[[AppContext, Reads], S]) -> Any:
    """`Depends` on `make(context, reads)`, on the request's read-only reads."""

    async def service(request: Request) -> S:
        return make(get_context(request), request_reads(request))

    return Depends(service)


async def page_params(request: Request) -> PageParams:
    # Read from the query string here rather than declared as two `Query` parameters: FastAPI's
    # per-parameter machinery cost the most polled list more than its database query. Routes
    # document the parameters with `openapi_extra=PAGE_QUERY`.
    query = request.query_params
    return page_of(query.get("limit"), query.get("cursor"))


Page = Annotated[PageParams, Depends(page_params)]  # ?limit= and ?cursor= (schemas.PAGE_QUERY)
