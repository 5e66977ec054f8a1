"""The deployment files (deploy/): checked offline, and against the real commands.

What is checked here: every Kubernetes manifest against the Kubernetes JSON schemas
(kubernetes-validate, strict), the two CRD kinds against schemas written by hand from
their documentation (tests/schemas), the Compose file with docker-compose, the
Prometheus config with promtool; and that the files agree with each other and with
smq: every command line parses with the real click command tree, every SMQ_ variable
is one the command reads, probes and scrapes hit the ports the parsed command lines
listen on and paths that real processes serve, selectors select, grace periods
outlast the graceful stops. Nothing here runs Docker or a cluster.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.core import ParameterSource
from click.testing import CliRunner

import smq
from conftest import need_program, stderr_line_after
from http_support import BIN, Server, http_get
from metrics_support import scrape, value
from smq.cli import main
from smq.embedded import EmbeddedRedis
from smq.worker import load_handler
from worker_support import wait_for

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose.yaml"
HANDLERS = DEPLOY / "handlers"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_SCHEMAS = {"ServiceMonitor": "servicemonitor.json", "ScaledObject": "scaledobject.json"}
JOB_NAMES = {"smq-exporter", "smq-api", "smq-worker"}
BACKLOG_QUERY = (
    'sum(smq_queue_messages_visible{queue="jobs"}) + sum(smq_queue_messages_in_flight{queue="jobs"})'
)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


MANIFESTS = [
    (path, doc)
    for path in sorted(K8S.rglob("*.yaml"))
    if path.name != "kustomization.yaml"
    for doc in _documents(path)
]


def _id(path: Path, doc: dict[str, Any]) -> str:
    return f"{path.relative_to(K8S)}:{doc['kind']}/{doc['metadata']['name']}"


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in MANIFESTS if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in _of_kind(kind) if doc["metadata"]["name"] == name]
    return found


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<` merge keys


def _seconds(duration: str | int) -> float:
    """A Compose duration (``40s``, ``1m30s``) or a number of seconds."""
    if isinstance(duration, int):
        return duration
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", duration)
    assert parts and duration, f"unreadable duration {duration!r}"
    hours, minutes, seconds = (float(p) if p else 0.0 for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


# -- the smq command lines of compose and Kubernetes, parsed by the real click tree --------


@dataclass
class Invocation:
    """One `smq ...` command line a deployment file runs, with the environment it gets."""

    where: str
    argv: list[str]
    env: dict[str, str]
    spec: dict[str, Any]  # the compose service or Kubernetes container it comes from
    pod: dict[str, Any] | None = None  # the Kubernetes pod spec (None for compose)


def _shell_commands(script: str) -> list[list[str]]:
    commands = [shlex.split(part) for part in script.split("&&")]
    assert all(command[0] == "smq" for command in commands), script
    return [command[1:] for command in commands]


def _interpolated(text: str) -> str:
    """Compose's ``${NAME:-default}`` with nothing set: the default."""
    return re.sub(r"\$\{[A-Z_]+(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(text))


def _compose_invocations() -> list[Invocation]:
    found = []
    for name, service in _compose()["services"].items():
        if not str(service.get("image", "")).startswith("smq:"):
            continue
        env = {k: _interpolated(v) for k, v in (service.get("environment") or {}).items()}
        entrypoint = service.get("entrypoint")
        if entrypoint:
            assert entrypoint == ["/bin/sh", "-c"], name
            commands = _shell_commands(service["command"][0])
        else:
            commands = [[str(arg) for arg in service["command"]]]
        found += [Invocation(f"compose service {name}", argv, env, service) for argv in commands]
    return found


def _kubernetes_invocations() -> list[Invocation]:
    config = {doc["metadata"]["name"]: doc.get("data", {}) for doc in _of_kind("ConfigMap")}
    found = []
    for doc in _of_kind("Deployment") + _of_kind("Job"):
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if container["image"] != "smq":
                continue
            env: dict[str, str] = {}
            for source in container.get("envFrom", []):
                env.update(config[source["configMapRef"]["name"]])
            for variable in container.get("env", []):
                env[variable["name"]] = variable.get("value", "from-a-secret:x")
            where = f"{doc['kind']} {doc['metadata']['name']} container {container['name']}"
            if container.get("command"):
                assert container["command"] == ["/bin/sh", "-c"], where
                commands = _shell_commands(container["args"][0])
            else:
                commands = [[str(arg) for arg in container["args"]]]
            found += [Invocation(where, argv, env, container, pod) for argv in commands]
    return found


INVOCATIONS = _compose_invocations() + _kubernetes_invocations()


def _env_names(param: click.Parameter, ctx: click.Context) -> set[str]:
    """The environment variables click reads for ``param`` in ``ctx``."""
    if param.envvar:
        return {param.envvar} if isinstance(param.envvar, str) else set(param.envvar)
    if isinstance(param, click.Option) and param.allow_from_autoenv and ctx.auto_envvar_prefix:
        return {f"{ctx.auto_envvar_prefix}_{param.name.upper()}"} if param.name else set()
    return set()


@dataclass
class Parsed:
    command: str  # the command path, "queue create"
    params: dict[str, Any]
    reads: set[str]  # every SMQ_ variable the command and its groups read
    sources: dict[str, ParameterSource | None]


def _parse(invocation: Invocation, monkeypatch: pytest.MonkeyPatch) -> Parsed:
    """Parse ``invocation`` as `smq` would, in its environment; fails as click would."""
    with monkeypatch.context() as env:
        for name in [n for n in os.environ if n.startswith("SMQ_")]:
            env.delenv(name)
        for name, text in invocation.env.items():
            env.setenv(name, str(text))
        ctx = main.make_context("smq", [], resilient_parsing=True)
        reads = set().union(*(_env_names(p, ctx) for p in main.params))
        command: click.Command = main
        path: list[str] = []
        args = list(invocation.argv)
        while isinstance(command, click.Group):
            assert args, f"{invocation.where}: `smq {' '.join(path)}` needs a sub-command"
            name = args.pop(0)
            assert name in command.commands, f"{invocation.where}: no command `smq {' '.join([*path, name])}`"
            command, path = command.commands[name], [*path, name]
            if isinstance(command, click.Group):
                ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
                reads |= set().union(*(_env_names(p, ctx) for p in command.params))
        try:
            leaf = command.make_context(path[-1], args, parent=ctx)
        except click.ClickException as error:
            raise AssertionError(
                f"{invocation.where}: `smq {shlex.join(invocation.argv)}`: {error}"
            ) from None
        reads |= set().union(*(_env_names(p, leaf) for p in command.params))
        sources = {p.name: leaf.get_parameter_source(p.name) for p in command.params if p.name}
        return Parsed(" ".join(path), dict(leaf.params), reads, sources)


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Invocation, Parsed]]:
    return [(invocation, _parse(invocation, monkeypatch)) for invocation in INVOCATIONS]


def _runs(parsed: list[tuple[Invocation, Parsed]], command: str) -> list[tuple[Invocation, Parsed]]:
    found = [(i, p) for i, p in parsed if p.command == command]
    assert found, f"no deployment file runs `smq {command}`"
    return found


# -- Kubernetes: schemas ----------------------------------------------------------------------


@pytest.mark.parametrize(("path", "doc"), MANIFESTS, ids=[_id(p, d) for p, d in MANIFESTS])
def test_every_kubernetes_manifest_is_valid_against_the_schema_of_its_kind(
    path: Path, doc: dict[str, Any]
) -> None:
    if doc["kind"] in CRD_SCHEMAS:
        schema = json.loads((SCHEMAS / CRD_SCHEMAS[doc["kind"]]).read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
        return
    # The newest Kubernetes version the package bundles, strict: unknown fields are errors.
    # A kind without a bundled schema is an error too, so that nothing goes unchecked.
    version = kubernetes_validate.latest_version()
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        at = ".".join(str(p) for p in error.path)
        raise AssertionError(f"{_id(path, doc)} (Kubernetes {version}): {at}: {error.message}") from None


def test_the_schemas_refuse_a_misspelt_field_so_the_checks_are_not_vacuous() -> None:
    deployment = copy.deepcopy(_named("Deployment", "smq-api"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readynessProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)
    for kind, bad in [
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(intervall="30s")),
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="30 seconds")),
        ("ScaledObject", lambda d: d["spec"].update(maxReplicas=5)),
        ("ScaledObject", lambda d: d["spec"]["triggers"][0]["metadata"].update(threshold=50)),
        ("ScaledObject", lambda d: d["spec"]["triggers"][0]["metadata"].pop("serverAddress")),
    ]:
        doc = copy.deepcopy(_of_kind(kind)[0])
        bad(doc)
        schema = json.loads((SCHEMAS / CRD_SCHEMAS[kind]).read_text())
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("folder", [K8S, K8S / "redis"], ids=["smq", "redis"])
def test_each_kustomization_lists_exactly_the_manifests_of_its_folder(folder: Path) -> None:
    (kustomization,) = _documents(folder / "kustomization.yaml")
    assert kustomization["kind"] == "Kustomization"
    files = {p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    for doc in (doc for path, doc in MANIFESTS if path.parent == folder):
        assert "namespace" not in doc["metadata"], (
            f"{doc['kind']}/{doc['metadata']['name']}: namespace-agnostic"
        )


def test_kubectl_kustomize_builds_both_kustomizations_and_sets_the_image() -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:  # CI does not install kubectl: the listing test above stands in for it
        pytest.skip("kubectl not installed (optional: renders the kustomizations offline)")
    for folder in (K8S, K8S / "redis"):
        done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
        assert len(rendered) == len([1 for path, _ in MANIFESTS if path.parent == folder])
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    (image,) = kustomization["images"]
    assert image["name"] == "smq"


# -- Compose and Prometheus: their own validators -------------------------------------------------


def test_the_compose_file_is_valid_for_docker_compose() -> None:
    compose = need_program(
        "docker-compose", "Debian: apt-get install docker-compose; it validates without an engine"
    )
    done = subprocess.run(
        [compose, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith(("SMQ_", "GRAFANA_", "COMPOSE_"))},
    )
    assert done.returncode == 0, done.stderr
    assert "version" not in _compose(), "Compose Specification: no version key"


def test_promtool_accepts_the_prometheus_config_and_the_alert_rules_it_loads(tmp_path: Path) -> None:
    promtool = need_program("promtool", "Debian: apt-get install prometheus")
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    # The container reads the rules at the path compose mounts them; here, next to the config.
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(DEPLOY / "prometheus" / "alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout


def test_compose_prometheus_loads_the_mounted_alert_rules_and_scrapes_the_three_jobs(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    prometheus = _compose()["services"]["prometheus"]
    mounted = {}
    for volume in prometheus["volumes"]:
        source, target = volume.split(":")[:2]
        mounted[target] = source
    assert (COMPOSE.parent / mounted["/etc/prometheus/prometheus.yml"]).resolve() == (
        DEPLOY / "prometheus" / "prometheus.yml"
    )
    assert (
        COMPOSE.parent / mounted["/etc/prometheus/alerts.yml"]
    ).resolve() == DEPLOY / "prometheus" / "alerts.yml"
    assert (DEPLOY / "prometheus" / "alerts.yml").is_file()
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert "/etc/prometheus/alerts.yml" in config["rule_files"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == JOB_NAMES
    # Each job reaches the compose service that runs its command, on the port it listens on.
    ports = {
        "smq-api": ("api", "serve", "port"),
        "smq-exporter": ("exporter", "exporter", "port"),
        "smq-worker": ("worker", "worker", "metrics_port"),
    }
    for job, (service, command, option) in ports.items():
        (listening,) = {
            p.params[option] for i, p in _runs(parsed, command) if i.where == f"compose service {service}"
        }
        targets = [t for c in jobs[job].get("static_configs", []) for t in c["targets"]]
        targets += [f"{n}:{c['port']}" for c in jobs[job].get("dns_sd_configs", []) for n in c["names"]]
        assert targets == [f"{service}:{listening}"], job
        assert jobs[job].get("metrics_path", "/metrics") == "/metrics"


def _datasource_references(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for child in node.values():
            yield from _datasource_references(child)
    elif isinstance(node, list):
        for child in node:
            yield from _datasource_references(child)


def test_grafana_provisioning_reads_the_mounted_dashboard_folder_from_the_compose_prometheus() -> None:
    grafana = _compose()["services"]["grafana"]
    mounts = {}
    for volume in grafana["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (COMPOSE.parent / source).resolve()
    provisioning = DEPLOY / "grafana" / "provisioning"
    assert mounts["/etc/grafana/provisioning/datasources"] == provisioning / "datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == provisioning / "dashboards"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "smq.yaml").read_text())["providers"]
    assert provider["type"] == "file"
    assert mounts[provider["options"]["path"]] == DEPLOY / "grafana" / "dashboards"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    dashboards = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
    assert dashboards, "the mounted folder holds the dashboards"
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        # File provisioning does not fill in an exported dashboard's __inputs: each panel
        # must name the provisioned data source by its uid, or through a variable.
        assert "__inputs" not in dashboard, path.name
        for reference in _datasource_references(dashboard):
            uid = reference.get("uid", "") if isinstance(reference, dict) else reference
            assert uid == source["uid"] or uid.startswith("$"), f"{path.name}: data source {reference}"
    assert "127.0.0.1:9090:9090" in _compose()["services"]["prometheus"]["ports"]
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


# -- the command lines against the command tree ----------------------------------------------


def test_every_smq_command_and_option_the_deployment_files_use_exists(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    # _parse fails on an unknown command or option, or a value click refuses.
    assert {p.command for _, p in parsed} == {"serve", "worker", "exporter", "queue apply"}


def test_every_smq_variable_the_deployment_files_set_is_read_by_its_command(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    for invocation, result in parsed:
        unread = {name for name in invocation.env if name.startswith("SMQ_")} - result.reads
        assert not unread, f"{invocation.where}: `smq {result.command}` reads no {sorted(unread)}"
    for invocation, result in parsed:
        # The Redis URL comes from the environment in every file, never the embedded Redis.
        assert result.sources["redis_url"] is ParameterSource.ENVIRONMENT, invocation.where
        assert result.params["redis_url"].startswith("redis://"), invocation.where
    for invocation, result in _runs(parsed, "serve"):
        assert result.params["host"] == "0.0.0.0"
        assert result.params["access_keys"] and not result.params["no_auth"], (
            f"{invocation.where}: signed requests"
        )


def _container_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == port]
    return int(number)


def _probe(container: dict[str, Any], kind: str) -> tuple[str, int]:
    get = container[kind]["httpGet"]
    return get["path"], _container_port(container, get["port"])


def test_probes_and_healthchecks_use_the_ports_the_parsed_commands_listen_on(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    expected = {  # command: (the option with its port, {probe: path}, host option)
        "serve": ("port", {"readinessProbe": "/ready", "livenessProbe": "/health"}, "host"),
        "exporter": ("port", {"readinessProbe": "/metrics", "livenessProbe": "/healthz"}, "host"),
        "worker": ("metrics_port", {"livenessProbe": "/metrics"}, "metrics_host"),
    }
    for command, (option, probes, host) in expected.items():
        for invocation, result in _runs(parsed, command):
            port = result.params[option]
            assert result.params[host] == "0.0.0.0", f"{invocation.where}: reachable from outside"
            if invocation.pod is None:  # compose: healthchecks and published ports
                check = invocation.spec.get("healthcheck")
                if check:
                    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w*)", " ".join(check["test"]))
                    assert url and int(url.group(1)) == port and url.group(2) in probes.values()
                for published in invocation.spec.get("ports", []):
                    assert published == f"127.0.0.1:{port}:{port}", invocation.where
                continue
            for kind, path in probes.items():
                assert _probe(invocation.spec, kind) == (path, port), f"{invocation.where} {kind}"


def test_grace_periods_outlast_the_graceful_stop_of_each_process(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    stops = {"serve": "shutdown_timeout", "worker": "grace_period"}
    for command, option in stops.items():
        for invocation, result in _runs(parsed, command):
            needed = float(result.params[option])
            if invocation.pod is None:
                assert _seconds(invocation.spec["stop_grace_period"]) > needed, invocation.where
                continue
            pre_stop = invocation.spec.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
            if pre_stop:
                assert pre_stop[0] == "sleep", invocation.where
                needed += float(pre_stop[1])
            assert invocation.pod["terminationGracePeriodSeconds"] > needed, invocation.where


QUEUES_FILE = "/etc/smq/queues.toml"


def _declared() -> dict[str, Any]:
    import tomllib  # Python 3.11+; the suite's interpreter

    return tomllib.loads((DEPLOY / "queues.toml").read_text())


def test_the_workers_run_the_example_handler_on_a_declared_queue(
    parsed: list[tuple[Invocation, Parsed]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HANDLERS))
    for invocation, result in _runs(parsed, "worker"):
        assert load_handler(result.params["handler"]).__module__ == "example", invocation.where
        assert result.params["queue"] == "jobs"
    assert _declared()["queues"]["jobs"]["DeadLetterQueue"] == "jobs-dlq"


def _mounts_the_declared_queues(invocation: Invocation) -> bool:
    """The file at QUEUES_FILE is deploy/queues.toml (compose) or the ConfigMap smq-queues."""
    if invocation.pod is None:
        return f"./queues.toml:{QUEUES_FILE}:ro" in invocation.spec.get("volumes", [])
    (mount,) = [
        m for m in invocation.spec.get("volumeMounts", []) if m["mountPath"] == str(Path(QUEUES_FILE).parent)
    ]
    (volume,) = [v for v in invocation.pod["volumes"] if v["name"] == mount["name"]]
    return bool(mount.get("readOnly")) and volume == {
        "name": mount["name"],
        "configMap": {"name": "smq-queues"},
    }


def test_the_api_applies_the_declared_queues_and_the_optional_setup_jobs_apply_the_same_file(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    import tomllib

    servers = _runs(parsed, "serve")
    assert {i.pod is None for i, _ in servers} == {True, False}, "compose and Kubernetes"
    for invocation, result in servers:
        assert result.params["queues_file"] == QUEUES_FILE, invocation.where
        assert _mounts_the_declared_queues(invocation), invocation.where
    setups = _runs(parsed, "queue apply")
    assert {i.pod is None for i, _ in setups} == {True, False}, "compose and Kubernetes"
    for invocation, result in setups:
        assert result.params["file"] == QUEUES_FILE, invocation.where
        assert _mounts_the_declared_queues(invocation), invocation.where
    (config,) = [doc for doc in _of_kind("ConfigMap") if doc["metadata"]["name"] == "smq-queues"]
    assert tomllib.loads(config["data"]["queues.toml"]) == _declared(), "the ConfigMap is deploy/queues.toml"
    kustomized = _documents(K8S / "kustomization.yaml")[0]["resources"]
    assert not any("optional" in resource for resource in kustomized), "the Job is optional"


def test_applying_the_declared_queues_makes_jobs_with_a_redrive_to_jobs_dlq_and_again_changes_nothing(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    outputs = []
    for _ in range(2):  # a second run (every API start, the Job again) changes nothing
        done = CliRunner().invoke(
            main, ["queue", "apply", str(DEPLOY / "queues.toml")], env={"SMQ_REDIS_URL": redis_server.url}
        )
        assert done.exit_code == 0, done.output
        outputs.append(done.output)
    assert "created jobs-dlq" in outputs[0] and "created jobs" in outputs[0], outputs[0]
    assert outputs[1].split() == ["unchanged", "jobs-dlq", "unchanged", "jobs"], outputs[1]
    policy = redis_client.get_queue("jobs").attributes().config.redrive_policy
    assert policy is not None and policy.dead_letter_queue == "jobs-dlq" and policy.max_receive_count == 5


def test_the_kustomize_image_tag_is_the_package_version() -> None:
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    (image,) = kustomization["images"]
    assert image["newTag"] == smq.__version__


# -- Kubernetes: the objects agree with each other ----------------------------------------------


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    return labels


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_services_and_disruption_budgets_select_the_pods_of_exactly_one_workload() -> None:
    workloads = _of_kind("Deployment") + _of_kind("StatefulSet")
    for service in _of_kind("Service"):
        (workload,) = [w for w in workloads if _selects(service["spec"]["selector"], _pod_labels(w))]
        containers = workload["spec"]["template"]["spec"]["containers"]
        for port in service["spec"]["ports"]:
            assert any(_container_port(c, port["targetPort"]) for c in containers), service["metadata"][
                "name"
            ]
    budgets = {b["metadata"]["name"]: b for b in _of_kind("PodDisruptionBudget")}
    assert set(budgets) == {"smq-api", "smq-worker"}
    for name, budget in budgets.items():
        selector = budget["spec"]["selector"]["matchLabels"]
        assert [w["metadata"]["name"] for w in workloads if _selects(selector, _pod_labels(w))] == [name]
    assert budgets["smq-api"]["spec"]["minAvailable"] < _named("Deployment", "smq-api")["spec"]["replicas"]


def test_each_servicemonitor_scrapes_a_named_port_of_the_service_named_for_its_job() -> None:
    services = _of_kind("Service")
    jobs = set()
    for monitor in _of_kind("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [s for s in services if _selects(selector, s["metadata"].get("labels", {}))]
        # Without spec.jobLabel, the operator names the job after the Service.
        assert "jobLabel" not in monitor["spec"]
        jobs.add(service["metadata"]["name"])
        port_names = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in port_names, monitor["metadata"]["name"]
            assert endpoint["path"] == "/metrics"
    assert jobs == JOB_NAMES
    assert _named("Service", "smq-worker")["spec"]["clusterIP"] == "None", "every worker is scraped"


def test_the_scaledobject_scales_the_worker_deployment_on_the_jobs_backlog() -> None:
    (scaled,) = _of_kind("ScaledObject")
    target = scaled["spec"]["scaleTargetRef"]
    assert (target.get("kind", "Deployment"), target["name"]) == ("Deployment", "smq-worker")
    assert "replicas" not in _named("Deployment", "smq-worker")["spec"], "KEDA owns the count"
    assert 1 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == BACKLOG_QUERY
    # Above what one worker holds (concurrency + prefetch), or a busy fleet never shrinks.
    args = _named("Deployment", "smq-worker")["spec"]["template"]["spec"]["containers"][0]["args"]
    concurrency = int(args[args.index("--concurrency") + 1])
    assert float(trigger["metadata"]["threshold"]) > 2 * concurrency
    assert _named("Deployment", "smq-exporter")["spec"]["strategy"]["type"] == "Recreate", "no doubled sum()"


def _dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_pods_run_as_the_image_s_non_root_user_with_limits_and_no_privilege() -> None:
    (user,) = [arg for instruction, arg in _dockerfile() if instruction == "USER"]
    uid = int(user.split(":")[0])
    assert uid != 0
    for doc in _of_kind("Deployment") + _of_kind("Job") + _of_kind("StatefulSet"):
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            where = f"{doc['metadata']['name']}/{container['name']}"
            if container["image"] == "smq":
                assert pod["securityContext"]["runAsUser"] == uid, where
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], where
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], where


def test_the_dockerfile_copies_what_pip_install_needs_and_dockerignore_keeps_it(
    parsed: list[tuple[Invocation, Parsed]],
) -> None:
    import tomllib  # Python 3.11+; the suite's interpreter

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    needed = {"pyproject.toml", project["project"]["readme"]}
    for package in setuptools["packages"]:
        source = setuptools.get("package-dir", {}).get(package, package.replace(".", "/"))
        needed.add(source.split("/")[0])
    instructions = _dockerfile()
    assert instructions[0] == ("ARG", "BASE=python:3.11-slim")
    copied = {
        src
        for instruction, arg in instructions
        if instruction == "COPY" and not arg.startswith("--from")
        for src in arg.split()[:-1]
    }
    assert needed <= copied, f"COPY misses {needed - copied}"
    # The wheels deploy/build-image downloads reach the build; the rest of build/ does not.
    assert "build/image-wheel[s]" in copied
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    ignored = [line for line in ignored if line and not line.startswith("#")]
    for path in copied - {"build/image-wheel[s]"}:
        assert not any(re.fullmatch(p.replace("**/", "").replace("*", "[^/]*"), path) for p in ignored), path
    assert {
        ".git",
        ".venv",
        "build/*",
        "!build/image-wheels",
        ".smq",
        "**/__pycache__",
        ".pytest_cache",
    } <= set(ignored)
    (entrypoint,) = [json.loads(arg) for instruction, arg in instructions if instruction == "ENTRYPOINT"]
    assert entrypoint[-1] == "/opt/smq/bin/docker-entrypoint"
    assert 'exec smq "$@"' in (DEPLOY / "docker-entrypoint.sh").read_text()
    # The handler folder is copied where PYTHONPATH points, so `example:handle` imports.
    (handlers,) = [arg.split()[1] for instruction, arg in instructions if arg.startswith("deploy/handlers ")]
    environment = [arg.split() for instruction, arg in instructions if instruction == "ENV"]
    assert any(f"PYTHONPATH={handlers}" in words for words in environment)


def test_redis_runs_with_aof_and_noeviction_in_compose_and_in_kubernetes() -> None:
    def flags(args: list[str]) -> dict[str, str]:
        assert args[0] == "redis-server"
        return {args[i][2:]: str(args[i + 1]) for i in range(1, len(args) - 1, 2)}

    redis = _compose()["services"]["redis"]
    stateful = _named("StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    for args in (redis["command"], stateful["args"]):
        settings = flags(args)
        assert settings["appendonly"] == "yes" and settings["appendfsync"] == "everysec"
        assert settings["maxmemory-policy"] == "noeviction"
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    assert stateful["volumeMounts"][0]["mountPath"] == "/data"
    assert _named("ConfigMap", "smq-config")["data"]["SMQ_REDIS_URL"] == "redis://redis:6379/0"
    assert _named("Service", "redis")["spec"]["ports"][0]["port"] == 6379


# -- the example handler, and the probe paths on real processes -------------------------------


def _job(body: str) -> smq.Job:
    message = smq.Message(
        queue="jobs",
        message_id="m-1",
        receipt_handle="jobs:m-1:r",
        body=body,
        attributes={},
        sent_at=0.0,
        receive_count=1,
        first_received_at=0.0,
    )
    return smq.Job(message)


def test_the_example_handler_returns_for_a_message_and_raises_for_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(HANDLERS))
    monkeypatch.setenv("EXAMPLE_WORK_SECONDS", "0")
    handle = load_handler("example:handle")
    handle(_job("resize image 42"))
    with pytest.raises(RuntimeError, match="fail"):
        handle(_job("fail"))


def test_smq_serve_with_access_keys_answers_its_probes_and_scrapes_unsigned(
    redis_server: EmbeddedRedis,
) -> None:
    # As the manifests run it: keys required, yet the kubelet and Prometheus sign nothing.
    server = Server(redis_server.url, "--access-key", "probe:secret")
    try:
        assert http_get(f"{server.url}/health")[0] == 200
        assert http_get(f"{server.url}/ready")[0] == 200
        status, text = http_get(f"{server.url}/metrics")
        assert status == 200 and "smq_api_requests_total" in text
        assert http_get(f"{server.url}/?Action=ListQueues")[0] == 403  # the SQS API itself is signed
    finally:
        assert server.stop() == 0


@contextmanager
def _running(argv: list[str], redis_url: str, marker: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``smq argv`` as a subprocess with the example handler on its path; stopped by its pid."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMQ_")}
    env.update(
        PYTHONPATH=str(HANDLERS), PYTHONUNBUFFERED="1", EXAMPLE_WORK_SECONDS="0", SMQ_REDIS_URL=redis_url
    )
    process = subprocess.Popen(
        [str(BIN / "smq"), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        yield process, stderr_line_after(process, marker)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def _on_loopback(argv: list[str], port_option: str, host_option: str) -> list[str]:
    """``argv`` listening on any free loopback port instead (tests never use a fixed port)."""
    argv = list(argv)
    argv[argv.index(port_option) + 1] = "0"
    argv[argv.index(host_option) + 1] = "127.0.0.1"
    return argv


def test_the_kubernetes_worker_command_runs_the_example_handler_and_serves_metrics(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    (worker,) = [i for i in INVOCATIONS if i.where.startswith("Deployment smq-worker")]
    dlq = redis_client.create_queue("jobs-dlq")
    jobs = redis_client.create_queue(
        "jobs", redrive_policy=smq.RedrivePolicy("jobs-dlq", max_receive_count=1)
    )
    argv = _on_loopback(worker.argv, "--metrics-port", "--metrics-host")
    with _running(argv, redis_server.url, "metrics on ") as (process, url):
        jobs.send("resize image 42")
        jobs.send("fail")
        url = url.replace("0.0.0.0", "127.0.0.1")
        wait_for(
            lambda: jobs.attributes().visible + jobs.attributes().in_flight == 0, 20, "the jobs to be worked"
        )
        wait_for(lambda: dlq.attributes().visible == 1, 20, "the failed job to be dead-lettered")
        samples = scrape(url)
        assert value(samples, "smq_worker_messages_total", queue="jobs", outcome="succeeded") == 1
        assert value(samples, "smq_worker_messages_total", queue="jobs", outcome="failed") == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


def test_the_kubernetes_exporter_command_serves_healthz_and_the_backlog_metrics(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    (exporter,) = [i for i in INVOCATIONS if i.where.startswith("Deployment smq-exporter")]
    redis_client.create_queue("jobs").send("resize image 42")
    argv = _on_loopback(exporter.argv, "--port", "--host")
    with _running(argv, redis_server.url, "serving ") as (process, url):
        assert http_get(url.replace("/metrics", "/healthz"))[0] == 200
        samples = scrape(url)
        # The two series the KEDA query adds up.
        assert value(samples, "smq_queue_messages_visible", queue="jobs") == 1
        assert value(samples, "smq_queue_messages_in_flight", queue="jobs") == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
