"""The embedded server: chosen explicitly, recorded in its data folder, never silently swapped."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import smq
from conftest import server_binary
from smq.embedded import EmbeddedRedis, ServerMismatch, embedded_server, find_redis_server, server_identity


def _smq(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def _record(folder: Path) -> dict[str, str]:
    return json.loads((folder / "redis" / "server.json").read_text())  # type: ignore[no-any-return]


def test_the_embedded_default_is_a_current_valkey() -> None:
    binary = embedded_server()
    assert binary is not None
    assert find_redis_server() == binary
    identity = server_identity(binary)
    assert identity.name == "Valkey" and identity.version >= (9, 0, 0)


def test_a_redis_server_on_path_is_not_used_unless_named(tmp_path: Path) -> None:
    decoy = tmp_path / "bin" / "redis-server"
    decoy.parent.mkdir()
    decoy.write_text(f"#!/bin/sh\ntouch {tmp_path / 'decoy-ran'}\nexit 1\n")
    decoy.chmod(decoy.stat().st_mode | stat.S_IXUSR)
    path = f"{decoy.parent}{os.pathsep}{os.environ['PATH']}"
    done = _smq("queue", "create", "jobs", "--data-dir", str(tmp_path / "data"), env={"PATH": path})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "decoy-ran").exists()
    assert _record(tmp_path / "data")["server"] == "Valkey"
    named = _smq(
        "queue",
        "list",
        "--data-dir",
        str(tmp_path / "other"),
        "--redis-server",
        "redis-server",
        env={"PATH": path},
    )
    assert named.returncode == 1 and (tmp_path / "decoy-ran").exists()  # named, so it ran (and failed)


def test_a_missing_server_binary_is_one_line(tmp_path: Path) -> None:
    done = _smq("queue", "list", "--data-dir", str(tmp_path), "--redis-server", str(tmp_path / "nope"))
    assert (done.returncode, done.stderr) == (
        1,
        f"smq: server binary {str(tmp_path / 'nope')!r} not found or not executable\n",
    )


def test_the_data_folder_records_its_server(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as server:
        assert server.identity is not None and server.identity.name == "Valkey"
    record = _record(tmp_path)
    assert record["server"] == "Valkey"
    assert tuple(int(n) for n in record["version"].split(".")) == server.identity.version


def test_an_older_or_different_server_refuses_a_folder_with_one_line_naming_both(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _smq("queue", "create", "jobs", "--data-dir", str(data)).returncode == 0  # Valkey writes it
    old = server_binary("redis-6.2")
    done = _smq("queue", "list", "--data-dir", str(data), "--redis-server", old)
    assert done.returncode == 1
    line = done.stderr.splitlines()[-1]
    assert len(done.stderr.splitlines()) == 2  # "no Redis runs ...: starting Redis 6.2.x", then the refusal
    assert line.startswith(f"smq: the data in {(data / 'redis').resolve()} was written by Valkey 9.")
    assert "Redis 6.2." in line and "--redis-server" in line
    again = _smq("queue", "list", "--data-dir", str(data))  # the default still sees the queue
    assert again.returncode == 0 and "jobs" in again.stdout


def test_a_newer_release_of_the_same_server_takes_over_the_folder(tmp_path: Path) -> None:
    binary = find_redis_server()
    identity = server_identity(binary)
    folder = tmp_path / "redis"
    folder.mkdir()
    older = ".".join(map(str, (identity.version[0], 0, 0)))
    (folder / "server.json").write_text(json.dumps({"server": identity.name, "version": older}))
    with EmbeddedRedis(folder):
        pass
    assert _record(tmp_path)["version"] == ".".join(map(str, identity.version))


def test_unrecorded_data_in_the_newer_aof_format_refuses_redis_6(tmp_path: Path) -> None:
    folder = tmp_path / "redis"
    (folder / "appendonlydir").mkdir(parents=True)
    with pytest.raises(ServerMismatch, match=r"written by Redis 7 or newer .* Redis 6\.2\."):
        EmbeddedRedis(folder, server=server_binary("redis-6.2")).start()


def test_a_client_without_a_url_uses_the_embedded_server_of_the_data_folder(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as server:
        with smq.Client(smq.Settings(data_dir=str(tmp_path))) as client:
            assert client.settings.url == server.url
            client.create_queue("jobs").send("hello")
        done = _smq("peek", "jobs", "--json", cwd=tmp_path.parent, env={"SMQ_DATA_DIR": str(tmp_path)})
        assert [m["body"] for m in json.loads(done.stdout)] == ["hello"]
        program = "import smq; print(smq.Client().create_queue('jobs').attributes().visible)"
        run = subprocess.run(
            [sys.executable, "-c", program],
            cwd=tmp_path.parent,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SMQ_DATA_DIR": str(tmp_path)},
        )
        assert (run.returncode, run.stdout) == (0, "1\n"), run.stderr


def test_a_client_without_a_url_and_no_server_running_says_how_to_start_one(tmp_path: Path) -> None:
    with smq.Client(settings=smq.Settings(data_dir=str(tmp_path))) as client:
        with pytest.raises(
            smq.BackendError, match=r"no embedded server answers at unix://.*start one with `smq serve`"
        ):
            client.list_queues()
    with smq.Client(settings=smq.Settings(data_dir=str(tmp_path))) as client:
        with pytest.raises(smq.BackendError, match=r"no embedded server answers at unix://"):
            client.create_queue("jobs")


def test_settings_may_be_the_first_argument_of_a_client() -> None:
    settings = smq.Settings(url="redis://example.invalid:6379/0", cluster=False)
    assert smq.Client(settings).settings is settings
    with pytest.raises(TypeError):
        smq.Client(settings, settings=settings)


def test_smq_version_names_the_release_and_the_distribution() -> None:
    done = _smq("--version")
    assert (done.returncode, done.stdout) == (0, f"smq {smq.__version__} (smq-redis)\n")
