"""Chaos checks, short forms: kill workers, Redis and `smq serve` under load; nothing acknowledged is lost.

Each scenario of ``chaos/_chaos.py`` runs some ten seconds of load with a kill
every two seconds on average, on a Redis of its own in the test's folder; the
long forms are ``chaos/chaos.py``. First, the check itself must see faults.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import ROOT

# The scenarios live beside their long forms; appended, so chaos/ shadows no installed module.
sys.path.append(str(ROOT / "chaos"))
from _chaos import REDIS_STATE, SCENARIOS, NeedsRoot, Options, run  # noqa: E402
from _chaos_ledger import check  # noqa: E402

# --- the check sees what it must see -------------------------------------------------


def _events(*steps: tuple[str, str, int, int, str]) -> list[smq.Event]:
    """Events of (kind, message id, receive count, at_ms, extra), in that order."""
    return [
        smq.Event("q", f"{at}-{i}", kind, mid, n, at, extra)
        for i, (kind, mid, n, at, extra) in enumerate(steps)
    ]


def _sent(token: str, mid: str) -> dict[str, Any]:
    return {"k": "sent", "t": token, "m": mid}


def _delivered(token: str, mid: str, n: int) -> dict[str, Any]:
    return {"k": "delivered", "t": token, "m": mid, "n": n, "p": 1}


def test_the_check_passes_a_clean_history() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 1)]
    events = _events(
        ("sent", "m1", 0, 1000, "0"), ("received", "m1", 1, 1010, "2000"), ("deleted", "m1", 1, 1020, "")
    )
    figures, problems = check(lines, events, left=0)
    assert figures.holds(), problems
    assert (figures.sent, figures.delivered, figures.duplicated) == (1, 1, 0)


def test_the_check_counts_a_receive_inside_a_running_lease_as_overlap() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 1), _delivered("a", "m1", 2)]
    events = _events(
        ("received", "m1", 1, 1000, "2000"),
        ("visibility_changed", "m1", 1, 2500, "2000"),  # a heartbeat: held until 4500
        ("received", "m1", 2, 4000, "2000"),
        ("deleted", "m1", 2, 4100, ""),
    )
    figures, problems = check(lines, events, left=0)
    assert figures.overlapping == 1 and not figures.holds()
    assert "held it until 4500" in problems[0]


def test_the_check_counts_a_receive_after_the_lease_ran_out_as_a_duplicate_only() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 1), _delivered("a", "m1", 2)]
    events = _events(
        ("received", "m1", 1, 1000, "2000"),
        ("visibility_changed", "m1", 1, 2500, "2000"),
        ("received", "m1", 2, 4500, "2000"),
        ("deleted", "m1", 2, 4600, ""),
    )
    figures, problems = check(lines, events, left=0)
    assert figures.holds(), problems
    assert (figures.duplicated, figures.extra_deliveries, figures.expired) == (1, 1, 1)


def test_the_check_lets_a_released_message_go_at_once() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 2)]
    events = _events(
        ("received", "m1", 1, 1000, "30000"),
        ("visibility_changed", "m1", 1, 1100, "0"),
        ("received", "m1", 2, 1101, "30000"),
        ("deleted", "m1", 2, 1200, ""),
    )
    figures, problems = check(lines, events, left=0)
    assert figures.holds(), problems
    assert (figures.released, figures.duplicated) == (1, 0)


def test_the_check_counts_a_receive_after_the_delete_as_reappeared() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 1)]
    events = _events(
        ("received", "m1", 1, 1000, "2000"),
        ("deleted", "m1", 1, 1100, ""),
        ("received", "m1", 2, 9000, "2000"),
    )
    figures, _ = check(lines, events, left=0)
    assert figures.reappeared == 1 and not figures.holds()


def test_the_check_counts_acknowledged_sends_never_delivered_as_lost() -> None:
    lines = [_sent("a", "m1"), _sent("b", "m2"), _delivered("b", "m2", 1), {"k": "unknown", "t": "c"}]
    figures, problems = check(lines, _events(("received", "m2", 1, 1000, "2000")), left=0)
    # a: never delivered; b: delivered, but the queue ran empty without recording its delete
    assert (figures.lost, figures.unrecorded) == (1, 1), problems
    assert figures.unknown == 1 and figures.unknown_landed == 0


def test_the_check_counts_what_the_queue_never_recorded() -> None:
    lines = [
        _sent("a", "m1"),
        _delivered("a", "m1", 1),
        _delivered("a", "m1", 2),
        {"k": "deleted", "t": "a", "m": "m1", "n": 2, "d": True},
    ]
    events = _events(("received", "m1", 1, 1000, "2000"), ("deleted", "m1", 1, 1100, ""))
    figures, _ = check(lines, events, left=0)
    assert figures.unrecorded == 2  # receive 2, and its delete


def test_the_check_counts_one_receipt_delivered_twice_as_overlap() -> None:
    lines = [_sent("a", "m1"), _delivered("a", "m1", 1), _delivered("a", "m1", 1)]
    events = _events(("received", "m1", 1, 1000, "2000"), ("deleted", "m1", 1, 1100, ""))
    figures, _ = check(lines, events, left=0)
    assert figures.overlapping == 1


# --- the scenarios ----------------------------------------------------------------------

SHORT = Options(
    seconds=10,
    rate=50,
    producers=2,
    workers=3,
    concurrency=3,
    consumers=2,
    kill_every=2,
    down_seconds=0.5,
    work_ms=250,  # each worker has a handler running at most moments: kills land on work
    drain_timeout=60,
)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chaos_loses_nothing_acknowledged_and_never_overlaps_leases(scenario: str, tmp_path: Path) -> None:
    try:
        result = run(scenario, tmp_path, SHORT)
    except NeedsRoot as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root: {error}")
        pytest.skip(str(error))
    _check_scenario(scenario, result)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["worker-kill", "worker-term"])
def test_async_workers_lose_nothing_acknowledged_and_never_overlap_leases(
    scenario: str, tmp_path: Path
) -> None:
    # The same with an async def handler: the receive loop, handlers and deletes on one event loop.
    _check_scenario(scenario, run(scenario, tmp_path, dataclasses.replace(SHORT, handler="async")))


def _check_scenario(scenario: str, result: Any) -> None:
    figures = result.figures
    evidence = "\n".join(result.problems[:20] + result.notes)
    assert not result.notes, evidence
    assert (figures.lost, figures.overlapping, figures.reappeared) == (0, 0, 0), evidence
    assert (figures.unrecorded, figures.left) == (0, 0), evidence
    assert figures.delivered == figures.sent >= 200
    assert result.kills >= 3
    if scenario == "worker-term":
        # A graceful stop finishes its running handlers and releases the rest unstarted.
        assert figures.duplicated == 0, evidence
    if scenario == "worker-kill":
        assert figures.expired > 0  # the kills left leases to run out, and those messages came back
    if scenario in REDIS_STATE:
        assert result.refused_sends > 0, "Redis's state changed, and no send was refused"


def test_the_check_counts_a_delivery_after_an_acknowledged_delete_as_undone() -> None:
    # A failover that loses a delete loses its event too: only the ledger shows it.
    lines = [
        _sent("a", "m1"),
        _delivered("a", "m1", 1),
        {"k": "deleted", "t": "a", "m": "m1", "n": 1, "d": True},
        _delivered("a", "m1", 1),
        {"k": "deleted", "t": "a", "m": "m1", "n": 1, "d": True},
    ]
    events = _events(("received", "m1", 1, 1000, "2000"), ("deleted", "m1", 1, 1100, ""))
    figures, problems = check(lines, events, left=0)
    assert figures.undone == 1 and not figures.holds()
    assert "after receive 1 deleted it" in problems[0]


# --- failover at the defaults: kill -9 or pause the primary of a Sentinel deployment -------

FAILOVER = Options(
    seconds=7,
    rate=40,
    producers=2,  # one of them through `smq serve` (boto3)
    workers=2,
    concurrency=2,
    consumers=2,  # one of them through `smq serve` (boto3)
    kill_every=3,  # the seed makes it 2 faults
    work_ms=50,
    drain_timeout=60,
    down_after_ms=1000,
    # A restarted node's full resync starts at once, not after Redis's default 5 s, which
    # waiting for a replica would wait out after each failover.
    redis_config=("repl-diskless-sync-delay 0",),
)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["sentinel-failover", "sentinel-pause"])
def test_a_sentinel_failover_at_the_defaults_erases_nothing_acknowledged(
    scenario: str, tmp_path: Path
) -> None:
    # No wait_replicas anywhere: the clients find replicas at start and wait for one, and the
    # data nodes refuse writes without one (min-replicas-to-write, EmbeddedSentinel's default).
    # A paused primary wakes up still a primary and answers what was queued to it; those
    # answers must be errors (OutcomeUnknown, Unavailable), never acknowledgements.
    result = run(scenario, tmp_path, FAILOVER)
    figures = result.figures
    evidence = "\n".join(result.problems[:20] + result.notes)
    assert result.strict
    assert not result.notes, evidence
    assert (figures.lost, figures.undone, figures.overlapping, figures.reappeared) == (0, 0, 0, 0), evidence
    assert (figures.unrecorded, figures.left) == (0, 0), evidence
    assert figures.delivered == figures.sent >= 100
    assert result.kills >= 2 and len(result.resume) == result.kills
    assert all(seconds < 30 for seconds in result.resume), result.resume
