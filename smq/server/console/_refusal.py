"""How the console answers an API action's error outside a form: 404, 403 or 400."""

from __future__ import annotations

from aiohttp import web

from .._errors import SqsError

MISSING = ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue")
"""The codes of a queue that does not exist (or that this access key may not see)."""


def refusal(error: SqsError) -> web.HTTPException:
    """The HTTP answer to ``error``: a missing queue 404, a denial 403, anything else 400."""
    if error.code in MISSING:
        return web.HTTPNotFound(
            text="<!doctype html><html lang=en><head><meta charset=utf-8><title>No such queue · smq</title>"
            '<link rel=stylesheet href="/console/style.css"></head><body><main><h1>No such queue</h1>'
            "<p>No such queue, or not one this access key may see: it may have been deleted.</p>"
            "<p><a href=/console>All queues</a></p></main></body></html>",
            content_type="text/html",
        )
    if error.code == "AccessDenied":
        return web.HTTPForbidden(text=f"Access denied: {error.message}")
    return web.HTTPBadRequest(text=f"{error.code}: {error.message}")
