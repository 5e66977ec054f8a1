"""The console's page of one queue and its actions, each through the API's own action.

Reads use GetQueueUrl, GetQueueAttributes, ListDeadLetterSourceQueues and
ListMessageMoveTasks; messages are looked at with the core's peek (read-only, authorized as a
ReceiveMessage); changes are SendMessage, SetQueueAttributes, PurgeQueue, DeleteMessage,
ChangeMessageVisibility and StartMessageMoveTask, as the signed-in key, with the API's checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from .._errors import SmqError
from ._authorize import authorize
from ._console_queue_pages import EDITABLE, EDITABLE_FIFO, STATES, QueueView, purge_confirm_page, queue_page
from ._console_refusal import MISSING, refusal
from ._console_sessions import Session
from ._context import Context
from ._errors import SqsError, from_core
from ._params import integer_text

if TYPE_CHECKING:
    from ._console import Console

PEEKED = 20  # messages the page shows of one state


class QueuePages:
    """Handlers of ``/console/queues/{name}`` and its forms."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/console/queues/{name}", self.show)
        router.add_get("/console/api/queue/{name}", self.counts)
        for action in ("send", "attributes", "purge", "message", "redrive"):
            router.add_post(f"/console/queues/{{name}}/{action}", getattr(self, action))

    # -- reading -------------------------------------------------------------------------------

    async def show(self, request: web.Request) -> web.Response:
        session, cookie = self.console.session_of(request)
        context = self.console.context(request, session)
        state = request.query.get("state", "visible")
        if state not in dict(STATES):
            state = "visible"
        try:
            view = await self._view(context, session, request.match_info["name"], state)
        except SqsError as error:
            raise refusal(error) from None
        return self.console.page(request, queue_page(view, notice=request.query.get("done", "")), cookie)

    async def counts(self, request: web.Request) -> web.Response:
        """The counts, counters and redrive progress of the page, as JSON."""
        context = self.console.context(request, self.console.api_session(request))
        try:
            params = await self._queue_params(context, request.match_info["name"])
            await authorize(context, self.console.service.policies, "GetQueueAttributes", params)
            info = await context.drive(context.queue(params)._attributes_steps())
            task = await self._newest_task(context, params)
        except SqsError as error:
            raise refusal(error) from None
        except SmqError as error:
            raise refusal(from_core(error)) from None
        return web.json_response(
            {
                "visible": info.visible,
                "in_flight": info.in_flight,
                "delayed": info.delayed,
                "oldest_age": None if info.oldest_age is None else int(info.oldest_age),
                "counters": dict(info.counters),
                "groups_in_flight": info.groups_in_flight,
                "noisy_groups": info.noisy_groups,
                "task": task,
            },
        )

    # -- changing ------------------------------------------------------------------------------

    async def send(self, request: web.Request) -> web.Response:
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        params["MessageBody"] = form.get("body", "")
        delay = form.get("delay", "").strip()
        if delay:
            # A number for the action to check; anything else as typed, for its error to name.
            number = integer_text(delay)
            params["DelaySeconds"] = delay if number is None else number
        if form.get("group", "").strip():
            params["MessageGroupId"] = form["group"].strip()
        if form.get("dedup", "").strip():
            params["MessageDeduplicationId"] = form["dedup"].strip()
        return await self._do(request, context, name, "SendMessage", params, "sent")

    async def attributes(self, request: web.Request) -> web.Response:
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        current = await self._attributes(context, params)
        editable = EDITABLE + (EDITABLE_FIFO if current.get("FifoQueue") == "true" else ())
        # Only what the user changed on the page: a field left as shown must not undo a change
        # someone else made since the page was loaded.
        changed = {
            attribute: form[attribute].strip()
            for attribute, _ in editable
            if attribute in form
            and form[attribute].strip() != form.get(f"was-{attribute}", current.get(attribute, "")).strip()
        }
        if not changed:
            raise web.HTTPSeeOther(f"/console/queues/{quote(name)}?done=saved")
        params["Attributes"] = changed
        return await self._do(request, context, name, "SetQueueAttributes", params, "saved")

    async def purge(self, request: web.Request) -> web.Response:
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        if form.get("confirm", "") != name:
            session, _ = self.console.session_of(request)
            return self.console.html(purge_confirm_page(name, self.console.sessions.csrf_token(session)))
        return await self._do(request, context, name, "PurgeQueue", params, "purged")

    async def message(self, request: web.Request) -> web.Response:
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        params["ReceiptHandle"] = form.get("receipt", "")
        if form.get("op") == "delete":
            return await self._do(request, context, name, "DeleteMessage", params, "deleted", "in_flight")
        params["VisibilityTimeout"] = 0
        return await self._do(
            request, context, name, "ChangeMessageVisibility", params, "released", "in_flight"
        )

    async def redrive(self, request: web.Request) -> web.Response:
        name, context, _ = await self._change(request)
        params = await self._queue_params(context, name)
        arn = context.arn_of(context.queue_name(params))
        return await self._do(request, context, name, "StartMessageMoveTask", {"SourceArn": arn}, "redrive")

    # -- helpers -------------------------------------------------------------------------------

    async def _change(self, request: web.Request) -> tuple[str, Context, dict[str, str]]:
        """A change's queue name, context and form, once its origin, session and token are checked."""
        session, form = await self.console.checked_form(request)
        return request.match_info["name"], self.console.context(request, session), form

    async def _do(
        self,
        request: web.Request,
        context: Context,
        name: str,
        action: str,
        params: dict[str, Any],
        done: str,
        state: str = "",
    ) -> web.Response:
        """Run ``action``; back to the queue's page, saying what was done or what went wrong."""
        try:
            await self.console.act(context, action, params)
        except SqsError as error:
            if error.code in MISSING or error.code == "AccessDenied":
                raise refusal(error) from None
            session, _ = self.console.session_of(request)
            try:
                view = await self._view(context, session, name, state or "visible")
            except SqsError as again:
                raise refusal(again) from None
            return self.console.html(queue_page(view, error=error.message), status=400)
        suffix = f"&state={state}" if state else ""
        raise web.HTTPSeeOther(f"/console/queues/{quote(name)}?done={done}{suffix}")

    async def _queue_params(self, context: Context, name: str) -> dict[str, Any]:
        """``{"QueueUrl": ...}`` of the queue ``name`` as the session's key knows it."""
        try:
            found = await self.console.act(context, "GetQueueUrl", {"QueueName": name})
        except SqsError as error:
            raise refusal(error) from None
        return {"QueueUrl": found["QueueUrl"]}

    async def _attributes(self, context: Context, params: dict[str, Any]) -> dict[str, str]:
        got = await self.console.act(context, "GetQueueAttributes", {**params, "AttributeNames": ["All"]})
        attributes: dict[str, str] = got.get("Attributes", {})
        return attributes

    async def _is_dead_letter(self, context: Context, params: dict[str, Any]) -> bool:
        sources = await self.console.act(context, "ListDeadLetterSourceQueues", {**params, "MaxResults": 1})
        return bool(sources.get("queueUrls"))

    async def _newest_task(self, context: Context, params: dict[str, Any]) -> dict[str, Any] | None:
        """Status and counts of the newest move task out of this dead-letter queue, if any."""
        if not await self._is_dead_letter(context, params):
            return None
        arn = context.arn_of(context.queue_name(params))
        listed = await self.console.act(context, "ListMessageMoveTasks", {"SourceArn": arn, "MaxResults": 1})
        for newest in listed.get("Results", []):
            return {
                "status": newest["Status"],
                "moved": newest["ApproximateNumberOfMessagesMoved"],
                "to_move": newest["ApproximateNumberOfMessagesToMove"],
            }
        return None

    async def _view(self, context: Context, session: Session, name: str, state: str) -> QueueView:
        params = await self._queue_params(context, name)
        attributes = await self._attributes(context, params)
        queue = context.queue(params)
        may_look = True
        try:
            await authorize(context, self.console.service.policies, "ReceiveMessage", params)
        except SqsError as error:
            if error.code != "AccessDenied":
                raise
            may_look = False  # the queue's policy keeps this key from its messages
        messages = []
        if may_look:
            try:
                messages = await context.call(lambda: queue.peek(state, limit=PEEKED))
            except SmqError as error:
                raise from_core(error) from None
        return QueueView(
            name=name,
            url=params["QueueUrl"],
            attributes=attributes,
            state=state,
            messages=messages,
            dead_letter=await self._is_dead_letter(context, params),
            csrf=self.console.sessions.csrf_token(session),
            limit=PEEKED,
            may_look=may_look,
        )
