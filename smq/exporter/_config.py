"""Which queues the exporter reports: an allow-list or a pattern, and a cap."""

from __future__ import annotations

import dataclasses
import re

from .._errors import InvalidParameter
from ..core._config import check_int, check_queue_name

MAX_QUEUES_LIMIT = 100_000

DEPRECATED_NAMES = {"smq_queue_max_receives": "smq_queue_max_receive_count"}
"""New name -> the name it had before 0.2.0, reported too with ``deprecated_names``. The old
name ends in ``_count``, which Prometheus keeps for histograms and summaries: ``promtool
check metrics`` refuses it on a gauge."""


@dataclasses.dataclass(frozen=True)
class ExporterConfig:
    """Settings of ``Exporter``: they bound the ``queue`` label's values.

    Attributes:
        queues: Report only these queues (an allow-list); empty: every queue.
        queue_pattern: Report only queues whose whole name matches this
            regular expression; None: no filter.
        max_queues: Report at most this many queues (1-100,000), the first
            by name; the rest are counted in ``smq_exporter_queues_skipped``.
        deprecated_names: Also report the metrics under the names they had
            before a rename, for dashboards not yet changed (see
            ``DEPRECATED_NAMES``; removed in 0.3.0).
    """

    queues: tuple[str, ...] = ()
    queue_pattern: str | None = None
    max_queues: int = 1000
    deprecated_names: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", tuple(self.queues))
        for name in self.queues:
            check_queue_name(name)
        check_int("max_queues", self.max_queues, 1, MAX_QUEUES_LIMIT)
        if self.queue_pattern is not None:
            try:
                re.compile(self.queue_pattern)
            except re.error as error:
                raise InvalidParameter(f"queue pattern {self.queue_pattern!r} is invalid: {error}") from None

    def select(self, names: list[str]) -> tuple[list[str], int]:
        """The names to report, sorted, and how many more the cap left out."""
        chosen = sorted(set(names))
        if self.queue_pattern is not None:
            pattern = re.compile(self.queue_pattern)
            chosen = [name for name in chosen if pattern.fullmatch(name)]
        return chosen[: self.max_queues], max(0, len(chosen) - self.max_queues)
