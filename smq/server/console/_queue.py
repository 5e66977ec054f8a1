"""The console's page of one queue and its actions, each through the API's own action.

Reads use GetQueueUrl, GetQueueAttributes, ListDeadLetterSourceQueues and
ListMessageMoveTasks; messages are looked at with the core's peek (read-only, authorized as a
ReceiveMessage), the history and consumers with the core's reads (authorized as a
GetQueueAttributes). Changes are SendMessage, SetQueueAttributes, PurgeQueue, DeleteQueue,
DeleteMessage, ChangeMessageVisibility and StartMessageMoveTask, as the signed-in key, with
the API's checks; one dead-lettered message is deleted or moved by the core's ``discard`` and
``move_message``, authorized as a DeleteMessage on its queue (and a SendMessage on where it goes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from aiohttp import web

from ..._errors import SmqError
from ...client._queue import Queue
from ...operations._consumers import Consumer
from ...operations._history import HISTORY_KEPT, HISTORY_STEP, Sample
from ...operations._history import read as read_history
from ...operations._peek import PeekedMessage
from .._authorize import authorize
from .._context import Context
from .._errors import SqsError, from_core
from .._params import integer_text
from ._messages import Looked, Query, look
from ._queue_pages import EDITABLE, EDITABLE_FIFO, QueueView, confirm_page, queue_page
from ._refusal import MISSING, refusal
from ._sessions import Session

if TYPE_CHECKING:
    from ._routes import Console

LIVE = 60.0  # seconds since its last heartbeat within which a consumer counts as receiving
SHOWN_CONSUMERS = 50


def is_live(consumer: Consumer) -> bool:
    """Whether ``consumer`` beat recently enough to count as receiving now."""
    return consumer.age <= LIVE


def consumer_json(consumer: Consumer) -> dict[str, Any]:
    """A consumer as the page shows it: kind, who, details, age and whether it is live."""
    info = consumer.info
    if consumer.kind == "worker":
        kind = "smq worker"
        who = f"{info.get('host', '?')} pid {info.get('pid', '?')}"
        detail = (
            f"{info.get('mode', '?')}, concurrency {info.get('concurrency', '?')}, "
            f"holds {info.get('held', 0)}, smq {info.get('version', '?')}"
        )
    else:
        kind = "SQS client"
        who = f"{info.get('agent', '?')} from {info.get('address', '?')}"
        detail = (
            f"access key {info.get('access_key') or '(none)'}, {info.get('receives', 0)} receives, "
            f"via {info.get('via', '?')}"
        )
    return {
        "id": consumer.id,
        "kind": kind,
        "who": who,
        "detail": detail,
        "age": round(consumer.age, 1),
        "live": is_live(consumer),
    }


def history_json(now: float, samples: list[Sample]) -> dict[str, Any]:
    """A history as the page's charts read it: fields once, then one row per sample."""
    fields = [field.name for field in dataclasses.fields(Sample)]
    return {
        "now": now,
        "step": HISTORY_STEP,
        "fields": fields,
        "samples": [[getattr(sample, name) for name in fields] for sample in samples],
    }


class QueuePages:
    """Handlers of ``/console/queues/{name}`` and its forms."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/console/queues/{name}", self.show)
        router.add_get("/console/api/queue/{name}", self.counts)
        router.add_get("/console/api/queue/{name}/history", self.history)
        for action in ("send", "attributes", "purge", "delete", "message", "one", "redrive"):
            router.add_post(f"/console/queues/{{name}}/{action}", getattr(self, action))

    # -- reading -------------------------------------------------------------------------------

    async def show(self, request: web.Request) -> web.Response:
        session, cookie = self.console.session_of(request)
        context = self.console.context(request, session)
        query = Query.of(request.query)
        try:
            view = await self._view(context, session, request.match_info["name"], query)
        except SqsError as error:
            raise refusal(error) from None
        return self.console.page(request, queue_page(view, notice=request.query.get("done", "")), cookie)

    async def counts(self, request: web.Request) -> web.Response:
        """The counts, counters and redrive progress of the page, as JSON."""
        try:
            context, queue, params = await self._readable(request)
            info = await context.drive(queue._attributes_steps())
            task = await self._newest_task(context, params)
            consumers = await context.call(queue.consumers, SHOWN_CONSUMERS)
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
                "consumers": [consumer_json(consumer) for consumer in consumers],
            },
        )

    async def history(self, request: web.Request) -> web.Response:
        """The queue's history (the last hour's samples), as JSON, for the page's charts."""
        try:
            context, queue, _ = await self._readable(request)
            now, samples = await context.call(read_history, context.client, queue.keys, HISTORY_KEPT)
        except SqsError as error:
            raise refusal(error) from None
        except SmqError as error:
            raise refusal(from_core(error)) from None
        return web.json_response(history_json(now, samples))

    async def _readable(self, request: web.Request) -> tuple[Context, Queue, dict[str, Any]]:
        """The context, queue and params of a JSON read of the page's queue, once the session's
        key is known to be allowed GetQueueAttributes on it."""
        context = self.console.context(request, self.console.api_session(request))
        params = await self._queue_params(context, request.match_info["name"])
        await authorize(context, self.console.service.policies, "GetQueueAttributes", params)
        return context, context.queue(params), params

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
            csrf = self.console.sessions.csrf_token(session)
            return self.console.html(confirm_page(name, csrf, "purge", typed=form.get("confirm")))
        return await self._do(request, context, name, "PurgeQueue", params, "purged")

    async def delete(self, request: web.Request) -> web.Response:
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        if form.get("confirm", "") != name:
            session, _ = self.console.session_of(request)
            csrf = self.console.sessions.csrf_token(session)
            return self.console.html(confirm_page(name, csrf, "delete", typed=form.get("confirm")))
        try:
            await self.console.act(context, "DeleteQueue", params)
        except SqsError as error:
            raise refusal(error) from None
        raise web.HTTPSeeOther("/console?done=deleted")

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
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        task: dict[str, Any] = {"SourceArn": context.arn_of(context.queue_name(params))}
        destination = form.get("destination", "").strip()
        if destination:
            try:
                to = await self._queue_params(context, destination, missing_is_error=True)
            except SqsError as error:
                return await self._again(request, context, name, Query(), error.message)
            task["DestinationArn"] = context.arn_of(context.queue_name(to))
        return await self._do(request, context, name, "StartMessageMoveTask", task, "redrive")

    async def one(self, request: web.Request) -> web.Response:
        """Delete, redrive or move one visible message of a dead-letter queue, by its id."""
        name, context, form = await self._change(request)
        params = await self._queue_params(context, name)
        back = form.get("back", "")
        query = Query.of(_query_of(back)) if back.startswith(f"/console/queues/{quote(name)}?") else Query()
        op = form.get("op", "")
        near = form.get("near", "0")
        destination = form.get("destination", "").strip()
        queue = context.queue(params)
        if not near.isdigit():
            return await self._again(request, context, name, query, "The message's place is not a number.")
        position = int(near)
        try:
            await authorize(context, self.console.service.policies, "DeleteMessage", params)
            if op == "delete":
                done = await context.call(queue.discard, form.get("id", ""), near=position)
            elif op in ("redrive", "move"):
                to_name = None
                if op == "move":
                    if not destination:
                        raise SqsError("MissingParameter", "Name the queue to move the message to.")
                    to = await self._queue_params(context, destination, missing_is_error=True)
                    await authorize(context, self.console.service.policies, "SendMessage", to)
                    to_name = context.queue_name(to)
                done = await context.call(queue.move_message, form.get("id", ""), to_name, near=position)
            else:
                raise SqsError("InvalidParameterValue", "Delete, redrive or move: nothing else.")
        except SmqError as error:
            return await self._again(request, context, name, query, from_core(error).message)
        except SqsError as error:
            if error.code == "AccessDenied":
                raise refusal(error) from None
            return await self._again(request, context, name, query, error.message)
        if not done:
            return await self._again(
                request, context, name, query,
                "The message is no longer where the page showed it (received, moved or deleted "
                "meanwhile): nothing was changed. Look again.",
            )  # fmt: skip
        separator = "&" if "?" in query.link(name) else "?"
        outcome = "one-deleted" if op == "delete" else "one-moved"
        raise web.HTTPSeeOther(query.link(name) + f"{separator}done={outcome}")

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
            return await self._again(request, context, name, Query(state=state or "visible"), error.message)
        suffix = f"&state={state}" if state else ""
        raise web.HTTPSeeOther(f"/console/queues/{quote(name)}?done={done}{suffix}")

    async def _again(
        self, request: web.Request, context: Context, name: str, query: Query, error: str
    ) -> web.Response:
        """The queue's page again, saying what went wrong (400)."""
        session, _ = self.console.session_of(request)
        try:
            view = await self._view(context, session, name, query)
        except SqsError as again:
            raise refusal(again) from None
        return self.console.html(queue_page(view, error=error), status=400)

    async def _queue_params(
        self, context: Context, name: str, missing_is_error: bool = False
    ) -> dict[str, Any]:
        """``{"QueueUrl": ...}`` of the queue ``name`` as the session's key knows it; a missing
        queue is a 404, or with ``missing_is_error`` an SqsError saying so (a form's mistake)."""
        try:
            found = await self.console.act(context, "GetQueueUrl", {"QueueName": name})
        except SqsError as error:
            if missing_is_error and error.code in MISSING:
                raise SqsError("QueueDoesNotExist", f"There is no queue {name}.") from None
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

    async def _view(self, context: Context, session: Session, name: str, query: Query) -> QueueView:
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
        looked = Looked([], query.offset, query.offset, True)
        try:
            if may_look:
                looked = await context.call(look, _peek_of(queue), query)
            consumers = await context.call(queue.consumers, SHOWN_CONSUMERS)
        except SmqError as error:
            raise from_core(error) from None
        dead_letter = await self._is_dead_letter(context, params)
        return QueueView(
            name=name,
            url=params["QueueUrl"],
            attributes=attributes,
            query=query,
            looked=looked,
            dead_letter=dead_letter,
            csrf=self.console.sessions.csrf_token(session),
            may_look=may_look,
            # Only a dead-letter queue's forms name another queue (redrive, move).
            names=await self.console.queue_names(context) if dead_letter else (),
            consumers=[consumer_json(consumer) for consumer in consumers],
        )


def _query_of(link: str) -> Mapping[str, str]:
    """The query of a console link (where a form's page came from)."""
    return dict(parse_qsl(urlsplit(link).query))


def _peek_of(queue: Queue) -> Callable[[str, int, int], list[PeekedMessage]]:
    """``queue.peek`` with its limit and offset as positional arguments."""
    return lambda state, limit, offset: queue.peek(state, limit=limit, offset=offset)
