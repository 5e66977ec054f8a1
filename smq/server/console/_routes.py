"""The web console served by ``smq serve`` under ``/console``: sign-in, sign-out, the queue table.

It reads through the same actions as the API, with the signed-in access key as the sender, so
a key sees in the console exactly the queues its API calls would (its account's, in the
server's region). Every form that changes something carries the session's CSRF token, and a
POST from another origin is refused before anything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from ..._errors import SmqError
from ...client._client import Client
from ...client._queue import Queue
from ...core._config import RedrivePolicy
from ...operations._history import HISTORY_KEPT, HISTORY_STEP
from ...operations._history import read as read_history
from .._actions import ACTIONS
from .._authorize import after, authorize
from .._context import Context
from .._errors import SqsError, from_core
from ._create import CreatePages
from ._pages import QueueRow, RowDetails, asset, queues_page, sign_in_page
from ._queue import QueuePages, is_live
from ._refusal import MISSING, refusal
from ._sessions import COOKIE, SESSION_SECONDS, Session, Sessions

if TYPE_CHECKING:
    from .._app import Service

TABLE_ROWS = 100  # queues in one page of the table
MINUTE = 60 // HISTORY_STEP  # samples a minute: the table's trend keeps one of each
NAMES_OFFERED = 1000  # queue names a form offers to choose from
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Console:
    """Request handlers of the console of one ``smq serve``."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.sessions = Sessions(service.config.access_keys)

    def install(self, app: web.Application) -> None:
        """Add the console's routes and headers to ``app`` (before the API's catch-all routes)."""
        app.on_response_prepare.append(_secure_headers)
        router = app.router
        router.add_get("/console", self.queues)
        router.add_get("/console/", self.queues)
        router.add_get("/console/style.css", self.style)
        router.add_get("/console/console.js", self.script)
        router.add_get("/console/api/queues", self.queues_json)
        router.add_get("/console/sign-in", self.sign_in_form)
        router.add_post("/console/sign-in", self.sign_in)
        router.add_post("/console/sign-out", self.sign_out)
        QueuePages(self).add_routes(router)
        CreatePages(self).add_routes(router)

    async def style(self, request: web.Request) -> web.Response:
        return web.Response(
            text=asset("console.css"), content_type="text/css", headers={"Cache-Control": "max-age=300"}
        )

    async def sign_in_form(self, request: web.Request) -> web.Response:
        if not self.sessions.signs_in:
            raise web.HTTPSeeOther("/console")
        return _html(sign_in_page())

    async def sign_in(self, request: web.Request) -> web.Response:
        self._check_origin(request)
        if not self.sessions.signs_in:
            raise web.HTTPSeeOther("/console")
        form = await _form(request)
        key_id, secret = form.get("key_id", "").strip(), form.get("secret", "")
        cookie = self.sessions.sign_in(key_id, secret)
        if cookie is None:
            return _html(sign_in_page("The access key id or the secret is not right."), status=401)
        response = web.HTTPSeeOther("/console")
        self.set_cookie(response, request, cookie)
        raise response

    async def sign_out(self, request: web.Request) -> web.Response:
        await self.checked_form(request)
        response = web.HTTPSeeOther("/console/sign-in" if self.sessions.signs_in else "/console")
        response.del_cookie(COOKIE, path="/console")
        raise response

    async def queues(self, request: web.Request) -> web.Response:
        session, cookie = self.session_of(request)
        prefix = request.query.get("prefix", "").strip()
        after = request.query.get("after", "").strip()
        context = self.context(request, session)
        rows, next_page = await self._rows(context, prefix, after)
        details = await self._details(context, rows)
        who = f"signed in as {session.key_id}" if session.key_id else "no access keys: open to all"
        page = queues_page(
            rows,
            details,
            prefix,
            who,
            self.sessions.csrf_token(session),
            after=after,
            next_page=next_page,
            signs_out=self.sessions.signs_in,
            notice=request.query.get("done", ""),
        )
        return self.page(request, page, cookie)

    async def queues_json(self, request: web.Request) -> web.Response:
        """The queue table's lines as JSON, for the page to update itself; with ``details=1``
        also what it reads every 10 s only (dead-letter mark, consumers, trend, rates)."""
        prefix = request.query.get("prefix", "").strip()
        after = request.query.get("after", "").strip()
        context = self.context(request, self.api_session(request))
        rows, next_page = await self._rows(context, prefix, after)
        lines = [dataclasses.asdict(row) for row in rows]
        if request.query.get("details") == "1":
            details = await self._details(context, rows)
            for line in lines:
                if line["name"] in details:
                    line.update(dataclasses.asdict(details[line["name"]]))
        return web.json_response({"queues": lines, "next": next_page})

    async def queue_names(self, context: Context) -> list[str]:
        """Names of the key's queues a form offers (the first ``NAMES_OFFERED``); none if it may
        not list them."""
        try:
            listed = await self.act(context, "ListQueues", {"MaxResults": NAMES_OFFERED})
        except SqsError:
            return []
        return [url.rsplit("/", 1)[-1] for url in listed.get("QueueUrls", [])]

    async def script(self, request: web.Request) -> web.Response:
        return web.Response(
            text=asset("console.js"), content_type="text/javascript", headers={"Cache-Control": "max-age=300"}
        )

    # -- helpers -------------------------------------------------------------------------------

    def session_of(self, request: web.Request) -> tuple[Session, str | None]:
        """The request's session, and a cookie to set when a server without keys made a new one."""
        session = self.sessions.session(request.cookies.get(COOKIE))
        if session is not None:
            return session, None
        if self.sessions.signs_in:
            raise web.HTTPSeeOther("/console/sign-in")
        return self.sessions.anonymous()

    def api_session(self, request: web.Request) -> Session:
        """The session of a request the pages' script makes; 401 (as JSON) without one."""
        session = self.sessions.session(request.cookies.get(COOKIE))
        if session is None:
            raise web.HTTPUnauthorized(text='{"error": "signed out"}', content_type="application/json")
        return session

    def page(self, request: web.Request, text: str, cookie: str | None = None) -> web.Response:
        """A console page; with ``cookie``, the new session ``session_of`` made for it."""
        response = _html(text)
        if cookie is not None:
            self.set_cookie(response, request, cookie)
        return response

    def context(self, request: web.Request, session: Session) -> Context:
        """The context of an API action taken as the session's access key."""
        return self.service.context(request, session.key_id)

    async def _rows(self, context: Context, prefix: str, after: str) -> tuple[list[QueueRow], str | None]:
        """A page of the table's lines for ``prefix`` (at most TABLE_ROWS, after the page token
        ``after``), and the next page's token if more queues match."""
        params: dict[str, Any] = {"QueueNamePrefix": prefix, "MaxResults": TABLE_ROWS}
        if after:
            params["NextToken"] = after
        try:
            listed = await self.act(context, "ListQueues", params)
            urls = listed.get("QueueUrls", [])
            rows = await asyncio.gather(*(self._row(context, url) for url in urls))
        except SqsError as error:
            raise refusal(error) from None
        return [row for row in rows if row is not None], listed.get("NextToken")

    async def _details(self, context: Context, rows: list[QueueRow]) -> dict[str, RowDetails]:
        """What the table shows of each row beyond its counts: authorized here, then read in one
        call to the thread pool (a hop per read would cost more than the reads)."""
        queues: list[tuple[QueueRow, Queue, bool]] = []
        for row in rows:
            params = {"QueueUrl": row.name}  # a bare name: the key's own account
            try:
                await authorize(context, self.service.policies, "ListDeadLetterSourceQueues", params)
                may_list = True
            except SqsError:
                may_list = False  # its policy hides its sources: no DLQ mark
            queues.append((row, context.queue(params), may_list))
        found: dict[str, RowDetails] = await context.call(_read_details, context.client, queues)
        return found

    async def act(self, context: Context, action: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run an API action as the session's access key, with the API's authorization."""
        try:
            await authorize(context, self.service.policies, action, params)
            result: dict[str, Any] = await ACTIONS[action](context, params)
            return result
        except SmqError as error:
            raise from_core(error) from None
        finally:
            after(self.service.policies, action)

    def set_cookie(self, response: web.StreamResponse, request: web.Request, cookie: str) -> None:
        """Give the browser a session cookie (``Secure`` when the console is reached over HTTPS)."""
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=SESSION_SECONDS,
            expires=time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + SESSION_SECONDS)),
            path="/console",
            httponly=True,
            samesite="Strict",
            secure=self._origin(request).startswith("https://"),
        )

    def html(self, text: str, status: int = 200) -> web.Response:
        """A console page, with the console's security headers."""
        return _html(text, status)

    async def checked_form(self, request: web.Request) -> tuple[Session, dict[str, str]]:
        """A change's session and form, once its origin, session and CSRF token are checked."""
        self._check_origin(request)
        session = self.sessions.session(request.cookies.get(COOKIE))
        if session is None:  # before reading a body that no one may send
            raise web.HTTPForbidden(text="The form has expired: load the page again.")
        form = await _form(request)
        if not self.sessions.check_csrf(session, form.get("csrf")):
            raise web.HTTPForbidden(text="The form has expired: load the page again.")
        return session, form

    def _origin(self, request: web.Request) -> str:
        """The console's origin as browsers name it: the public URL's if set (behind a proxy)."""
        public = self.service.config.public_url
        if public:
            parts = urlsplit(public)
            return f"{parts.scheme}://{parts.netloc}"
        return f"{request.scheme}://{request.host}"

    def _check_origin(self, request: web.Request) -> None:
        """Refuse a POST that a page of another origin sent (browsers name the origin of a form)."""
        origin = request.headers.get("Origin")
        if origin is not None and origin != self._origin(request):
            raise web.HTTPForbidden(text="A change must come from the console's own pages.")

    async def _row(self, context: Context, url: str) -> QueueRow | None:
        """The table line of the queue at ``url``; None if it went away meanwhile."""
        params = {"QueueUrl": url}
        try:
            await authorize(context, self.service.policies, "GetQueueAttributes", params)
            info = await context.drive(context.queue(params)._attributes_steps())
        except (SqsError, SmqError) as error:
            mapped = error if isinstance(error, SqsError) else from_core(error)
            if mapped.code in MISSING or mapped.code == "AccessDenied":
                return None  # gone meanwhile, or a policy keeps this key out: no line
            raise mapped from None
        age = None if info.oldest_age is None else int(info.oldest_age)
        return QueueRow(
            name=url.rsplit("/", 1)[-1],
            fifo=info.config.fifo_queue,
            visible=info.visible,
            in_flight=info.in_flight,
            delayed=info.delayed,
            oldest_age=age,
            dead_letters=await self._dead_letters(context, info.config.redrive_policy),
            groups_in_flight=info.groups_in_flight if info.config.fifo_queue else None,
            counters={key: info.counters.get(key, 0) for key in ("sent", "received", "deleted")},
        )

    async def _dead_letters(self, context: Context, policy: RedrivePolicy | None) -> int | None:
        """Messages waiting in the dead-letter queue of ``policy`` (of the key's own account only)."""
        if policy is None or context.account_of(policy.dead_letter_queue) != context.account:
            return None
        params = {"QueueUrl": context.url_of(policy.dead_letter_queue)}
        try:
            await authorize(context, self.service.policies, "GetQueueAttributes", params)
            info = await context.drive(context.client.queue(policy.dead_letter_queue)._attributes_steps())
        except (SqsError, SmqError):
            return None  # deleted meanwhile, unreachable, or its policy keeps this key out: none shown
        return int(info.visible + info.delayed)


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html")


async def _form(request: web.Request) -> dict[str, str]:
    """The fields of a posted form (400 when its body is not a readable form)."""
    try:
        posted = await request.post()
    except (UnicodeDecodeError, ValueError):
        raise web.HTTPBadRequest(text="The form cannot be read.") from None
    return {key: value for key, value in posted.items() if isinstance(value, str)}


async def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every console response, pages, JSON and errors alike, carries the console's headers."""
    if request.path == "/console" or request.path.startswith("/console/"):
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)


def _read_details(client: Client, queues: list[tuple[QueueRow, Queue, bool]]) -> dict[str, RowDetails]:
    """Each row's dead-letter mark, consumers, trend and rates (rows gone meanwhile left out)."""
    found = {}
    for row, queue, may_list in queues:
        try:
            sources = client.dead_letter_sources(queue.name, limit=1) if may_list else []
            consumers = queue.consumers()
            now, samples = read_history(client, queue.keys, HISTORY_KEPT, MINUTE)
        except SmqError:
            continue
        rates = None
        if len(samples) >= 2 and 0 < samples[-1].at - samples[-2].at <= 2 * MINUTE * HISTORY_STEP:
            apart = samples[-1].at - samples[-2].at  # the last minute's average
            rates = {
                key: max(0, getattr(samples[-1], key) - getattr(samples[-2], key)) / apart
                for key in ("sent", "received", "deleted")
            }
        found[row.name] = RowDetails(
            dead_letter=bool(sources),
            consumers=sum(1 for consumer in consumers if is_live(consumer)),
            trend=[(sample.at, sample.visible + sample.in_flight) for sample in samples],
            now=now,
            rates=rates,
        )
    return found
