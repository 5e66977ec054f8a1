"""The console's form to create a queue: standard or FIFO, its attributes, its dead-letter queue.

It runs CreateQueue as the signed-in key, with the API's validation: a value out of range
comes back on the form with the API's own message, and the values typed stay in place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from .._errors import SqsError
from ._pages import page
from ._refusal import MISSING

if TYPE_CHECKING:
    from ._routes import Console

# (attribute, label, hint), in the order the form shows them.
NUMBERS = (
    ("VisibilityTimeout", "Visibility timeout", "seconds, 0 to 43,200; default 30"),
    ("DelaySeconds", "Delivery delay", "seconds, 0 to 900; default 0"),
    ("ReceiveMessageWaitTimeSeconds", "Receive message wait time", "seconds, 0 to 20; default 0"),
    ("MessageRetentionPeriod", "Message retention period", "seconds, 60 to 1,209,600; default 345,600"),
    ("MaximumMessageSize", "Maximum message size", "bytes, 1,024 to 1,048,576; default 1,048,576"),
)


def create_page(csrf: str, names: list[str], form: Mapping[str, str] | None = None, error: str = "") -> str:
    """The form; with ``form`` and ``error``, as it was sent and what was wrong."""
    form = form or {}

    def value(name: str) -> str:
        return escape(form.get(name, ""))

    fifo = form.get("type") == "fifo"
    numbers = "".join(
        f"<label for=c-{attribute}>{label} <span class=muted>({escape(hint)})</span></label>"
        f'<input id=c-{attribute} name={attribute} inputmode=numeric value="{value(attribute)}">'
        for attribute, label, hint in NUMBERS
    )
    options = "".join(f'<option value="{escape(name)}"></option>' for name in names)
    shown = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    body = (
        f"<header><h1>Create queue</h1><a href=/console>All queues</a></header><main>{shown}"
        "<form method=post action=/console/create>"
        f'<input type=hidden name=csrf value="{escape(csrf)}">'
        "<fieldset><legend>Type</legend>"
        f"<label><input type=radio name=type value=standard{'' if fifo else ' checked'}>Standard: "
        "at-least-once, best-effort order</label>"
        f"<label><input type=radio name=type value=fifo{' checked' if fifo else ''}>FIFO: "
        "in order per message group, deduplicated; the name ends in <code>.fifo</code></label></fieldset>"
        "<label for=c-name>Name <span class=muted>(1 to 80 letters, digits, - and _; "
        "a FIFO queue's ends in .fifo)</span></label>"
        f'<input id=c-name name=name required maxlength=80 autocomplete=off value="{value("name")}">'
        f"{numbers}"
        "<label><input type=checkbox name=ContentBasedDeduplication value=true"
        f"{' checked' if form.get('ContentBasedDeduplication') else ''}>Content-based deduplication "
        "<span class=muted>(FIFO queues: the body's SHA-256 is the deduplication id)</span></label>"
        "<fieldset><legend>Dead-letter queue</legend>"
        "<label for=c-dlq>Queue that receives messages received too often "
        "<span class=muted>(an existing queue of the same type; empty: none)</span></label>"
        f'<input id=c-dlq name=dlq list=queue-names autocomplete=off value="{value("dlq")}">'
        f"<datalist id=queue-names>{options}</datalist>"
        "<label for=c-max>Maximum receives <span class=muted>(1 to 1,000; default 10)</span></label>"
        f'<input id=c-max name=max_receive_count inputmode=numeric value="{value("max_receive_count")}">'
        "</fieldset><div><button type=submit>Create queue</button></div></form></main>"
    )
    return page("Create queue", body)


class CreatePages:
    """Handlers of ``/console/create``."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/console/create", self.form)
        router.add_post("/console/create", self.create)

    async def form(self, request: web.Request) -> web.Response:
        session, cookie = self.console.session_of(request)
        names = await self.console.queue_names(self.console.context(request, session))
        return self.console.page(
            request, create_page(self.console.sessions.csrf_token(session), names), cookie
        )

    async def create(self, request: web.Request) -> web.Response:
        session, form = await self.console.checked_form(request)
        context = self.console.context(request, session)
        name = form.get("name", "").strip()
        try:
            attributes = await self._attributes(context, form)
            existed = await self._exists(context, name)
            await self.console.act(context, "CreateQueue", {"QueueName": name, "Attributes": attributes})
        except SqsError as error:
            if error.code == "AccessDenied":
                raise web.HTTPForbidden(text=error.message) from None
            names = await self.console.queue_names(context)
            csrf = self.console.sessions.csrf_token(session)
            return self.console.html(create_page(csrf, names, form, error.message), status=400)
        raise web.HTTPSeeOther(f"/console/queues/{quote(name)}?done={'exists' if existed else 'created'}")

    async def _exists(self, context: Any, name: str) -> bool:
        """Whether the key's account has a queue ``name`` (CreateQueue succeeds on one whose
        attributes match: the page says it changed nothing)."""
        try:
            await self.console.act(context, "GetQueueUrl", {"QueueName": name})
        except SqsError:
            return False
        return True

    async def _attributes(self, context: Any, form: Mapping[str, str]) -> dict[str, str]:
        """CreateQueue's attributes from the form: only the fields filled in."""
        attributes = {
            attribute: form[attribute].strip()
            for attribute, _, _ in NUMBERS
            if form.get(attribute, "").strip()
        }
        if form.get("type") == "fifo":
            attributes["FifoQueue"] = "true"
            if form.get("ContentBasedDeduplication"):
                attributes["ContentBasedDeduplication"] = "true"
        elif form.get("ContentBasedDeduplication"):
            raise SqsError("InvalidAttributeName", "Content-based deduplication is for FIFO queues only.")
        dlq = form.get("dlq", "").strip()
        if dlq:
            try:
                found = await self.console.act(context, "GetQueueUrl", {"QueueName": dlq})
            except SqsError as error:
                if error.code in MISSING:
                    raise SqsError(
                        "InvalidParameterValue", f"The dead-letter queue {dlq} does not exist."
                    ) from None
                raise
            arn = context.arn_of(context.queue_name({"QueueUrl": found["QueueUrl"]}))
            count = form.get("max_receive_count", "").strip() or "10"
            policy: dict[str, Any] = {"deadLetterTargetArn": arn, "maxReceiveCount": count}
            attributes["RedrivePolicy"] = json.dumps(policy)
        return attributes
