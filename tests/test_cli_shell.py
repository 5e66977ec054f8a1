"""The command line as scripts and people meet it: errors, environment variables, real processes,
and the embedded Redis a command starts when no URL is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
from click.core import ParameterSource
from click.testing import CliRunner

import smq
from smq.cli import main
from smq.embedded import EmbeddedRedis

# -- errors: one line, or a traceback under -v ----------------------------------------------------


def test_a_core_error_is_one_line_on_stderr_and_exit_status_1(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    done = CliRunner().invoke(main, ["queue", "show", "nope", "--redis-url", redis_server.url])
    assert (done.exit_code, done.stdout, done.stderr) == (1, "", "smq: queue 'nope' does not exist\n")


def test_verbose_prints_the_traceback_instead_of_one_line(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    for args, env in ((["-v"], {}), ([], {"SMQ_VERBOSE": "1"})):
        done = CliRunner().invoke(
            main, [*args, "queue", "show", "nope", "--redis-url", redis_server.url], env=env
        )
        assert done.exit_code == 1
        assert done.stderr.startswith("Traceback (most recent call last):")
        assert done.stderr.rstrip().endswith("QueueDoesNotExist: queue 'nope' does not exist")


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    done = CliRunner().invoke(main, ["queue", "list", "--redis-url", f"unix://{tmp_path}/none.sock"])
    assert done.exit_code == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("smq: ") and "none.sock" in line


def test_a_redis_error_outside_the_core_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(self: smq.Client, *args: Any, **kwargs: Any) -> list[str]:
        raise redis.ResponseError("WRONGTYPE Operation against a key\nholding the wrong kind of value")

    monkeypatch.setattr(smq.Client, "list_queues", broken)
    done = CliRunner().invoke(main, ["queue", "list", "--redis-url", f"unix://{tmp_path}/none.sock"])
    assert (done.exit_code, done.stderr) == (
        1,
        "smq: WRONGTYPE Operation against a key holding the wrong kind of value\n",
    )


def test_usage_errors_keep_click_s_message_and_exit_status_2() -> None:
    done = CliRunner().invoke(main, ["queue", "create"])
    assert done.exit_code == 2 and "Missing argument 'NAME'" in done.stderr
    assert CliRunner().invoke(main, ["no-such-command"]).exit_code == 2


# -- every option reads an SMQ_ environment variable ----------------------------------------------


def _commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _sample(option: click.Option, tmp_path: Path) -> str:
    """A valid value for ``option`` that is not its default, as an environment variable gives it."""
    kind = option.type
    if option.is_flag:
        return "0" if option.default else "1"
    if isinstance(kind, click.Choice):
        return next(str(c) for c in kind.choices if c != option.default)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        low = kind.min if kind.min is not None else 0
        return next(
            str(v) for v in (low + 1, low + 2) if v != option.default and (kind.max is None or v <= kind.max)
        )
    if isinstance(kind, click.types.IntParamType):
        return "7"
    if isinstance(kind, click.types.FloatParamType):
        return "7.5"
    if isinstance(kind, click.Path):
        (tmp_path / "from-env").write_text("x")
        return str(tmp_path / "from-env")
    return "key=value" if option.multiple else "from-env"


def test_every_option_of_every_command_reads_an_smq_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = 0
    contexts: dict[tuple[str, ...], click.Context] = {}
    for path, command in _commands(main):
        parent = contexts.get(path[:-1])
        with command.make_context(
            path[-1] if path else "smq", [], parent=parent, resilient_parsing=True
        ) as ctx:
            contexts[path] = ctx
        for param in command.params:
            if not isinstance(param, click.Option) or param.name in (None, "help"):
                continue
            if param.envvar:
                names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            else:
                assert param.allow_from_autoenv, f"smq {' '.join(path)} {param.opts[0]}"
                # Named for its flag, so that the variable is: SMQ_SEND_DELAY for smq send --delay.
                flag = max((o for o in param.opts if o.startswith("--")), key=len)
                assert param.name == flag[2:].replace("-", "_"), (path, param.opts, param.name)
                names = [f"{ctx.auto_envvar_prefix}_{param.name.upper()}"]
            assert all(name.startswith("SMQ_") for name in names), (path, param.opts, names)
            with monkeypatch.context() as env:
                env.setenv(names[0], _sample(param, tmp_path))
                probe = command.make_context(ctx.info_name, [], parent=parent, resilient_parsing=True)
                source = probe.get_parameter_source(param.name)
                assert source is ParameterSource.ENVIRONMENT, (path, param.opts, names[0])
            checked += 1
    assert checked > 60  # every command of the tree was reached


def test_environment_variables_set_options_of_a_command(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    jobs = redis_client.create_queue("jobs")
    env = {
        "SMQ_REDIS_URL": redis_server.url,
        "SMQ_SEND_DELAY": "60",
        "SMQ_JSON": "1",
        "SMQ_SEND_ATTRIBUTE": "a=1 b=2",
    }
    done = CliRunner().invoke(main, ["send", "jobs", "later"], env=env)
    assert done.exit_code == 0, done.output
    assert "message_id" in json.loads(done.stdout)
    (peeked,) = jobs.peek("delayed")
    assert set(peeked.attributes) == {"a", "b"}


# -- real processes -------------------------------------------------------------------------------


def _smq(*args: str, input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "smq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=input,
        env=env,
        cwd=cwd,
    )


def test_the_cli_as_a_process_sends_lines_from_stdin_then_receives_them(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    url = redis_server.url
    assert _smq("queue", "create", "jobs", "--redis-url", url).returncode == 0
    sent = _smq("send", "jobs", "-", "--redis-url", url, input="one\ntwo\nthree\n")
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, "sent 3 messages\n", "")
    received = _smq("receive", "jobs", "--max-messages", "10", "--delete", "--json", "--redis-url", url)
    assert received.returncode == 0, received.stderr
    assert sorted(m["body"] for m in json.loads(received.stdout)) == ["one", "three", "two"]
    assert redis_client.get_queue("jobs").attributes().counters["deleted"] == 3


def test_without_a_url_a_command_starts_the_embedded_redis_and_the_next_sees_its_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = _smq("queue", "create", "jobs", "--data-dir", str(data))
    assert created.returncode == 0, created.stderr
    (note,) = created.stderr.splitlines()
    assert note.startswith(f"smq: no Redis runs in {data / 'redis'}: starting Valkey 9.")
    assert note.endswith("for this command (smq serve keeps one running; --redis-url picks another)")
    assert _smq("send", "jobs", "kept between commands", "--data-dir", str(data)).returncode == 0
    peeked = _smq("peek", "jobs", "--json", "--data-dir", str(data))
    assert [m["body"] for m in json.loads(peeked.stdout)] == ["kept between commands"]
    assert list((data / "redis").glob("appendonly*"))
    with pytest.raises(redis.ConnectionError):  # each command stopped the server it started
        redis.Redis(unix_socket_path=str(data / "redis" / "redis.sock"), socket_timeout=1).ping()


def test_without_a_url_a_command_uses_the_embedded_redis_that_runs_already(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as server, smq.Client(server.url) as client:
        client.create_queue("jobs").send("hello")
        done = CliRunner().invoke(main, ["receive", "jobs", "--json", "--data-dir", str(tmp_path)])
        assert done.exit_code == 0, done.output
        assert done.stderr == ""  # nothing started
        assert [m["body"] for m in json.loads(done.stdout)] == ["hello"]
        assert client.get_queue("jobs").attributes().in_flight == 1


def test_cluster_without_a_url_is_refused_with_one_line(tmp_path: Path) -> None:
    done = CliRunner().invoke(main, ["queue", "list", "--cluster", "--data-dir", str(tmp_path)])
    assert (done.exit_code, done.stderr) == (
        1,
        "smq: --cluster needs --redis-url (the embedded Redis is not a cluster)\n",
    )


def test_commands_that_start_the_embedded_redis_take_turns(tmp_path: Path) -> None:
    import fcntl
    import threading

    (tmp_path / "redis").mkdir()
    results: list[Any] = []
    with open(tmp_path / "redis" / "cli.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a command running its own server holds it
        command = threading.Thread(
            target=lambda: results.append(
                CliRunner().invoke(main, ["queue", "list", "--data-dir", str(tmp_path)])
            )
        )
        command.start()
        command.join(0.5)
        assert command.is_alive() and not results  # waiting for its turn
    command.join(30)
    (done,) = results
    assert done.exit_code == 0, done.output
    waited, started = done.stderr.splitlines()
    assert waited == f"smq: waiting for another smq command using the Redis in {tmp_path / 'redis'}"
    assert started.startswith("smq: no Redis runs in")
