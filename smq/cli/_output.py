"""What commands print: JSON for scripts (``--json``), aligned tables for people."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(command: F) -> F:
    """Add ``--json`` (keyword ``as_json``, env SMQ_JSON) to a command."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        envvar="SMQ_JSON",
        help="Print JSON, for scripts, instead of a table (env SMQ_JSON).",
    )(command)


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout (what ``json`` cannot encode, as text)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _is_number(cell: object) -> bool:
    return isinstance(cell, (int, float)) and not isinstance(cell, bool)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Rows under headers in aligned columns; numbers to the right, None as '-'."""
    values = [list(row) for row in rows]
    cells = [[_cell(value) for value in row] for row in values]
    numeric = [
        any(_is_number(row[i]) for row in values)
        and all(row[i] is None or _is_number(row[i]) for row in values)
        for i in range(len(headers))
    ]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(row: Sequence[str]) -> str:
        parts = [text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i]) for i, text in enumerate(row)]
        return "  ".join(parts).rstrip()

    click.echo(line([h.upper() for h in headers]))
    for row in cells:
        click.echo(line(row))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def age(seconds: float | None) -> str:
    """A duration for people: 42s, 3m05s, 2h10m, 4d03h ('-' for None)."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def preview(body: str, width: int = 50) -> str:
    """The start of a body on one line (newlines and tabs shown as \\n, \\t)."""
    flat = body.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return flat if len(flat) <= width else flat[: width - 3] + "..."
