"""The Prometheus rules and the Grafana dashboard of deploy/, checked offline.

promtool checks the rules and runs their unit tests (deploy/prometheus/alerts_test.yml); the
tests here make sure every alert is tested both ways, carries what an on-call person needs, and
that the dashboard is well formed. `promql_expressions()` is shared with the metric-name drift
test, which compares the names used here with the ones the processes emit.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from conftest import need_program

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERT_TESTS = PROMETHEUS / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "smq.json"
DATASOURCE = "${datasource}"
# Grafana's variables, replaced by values PromQL accepts before promtool parses an expression.
_GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$queue": ".+"}


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, and the panels a collapsed row holds."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _variable_query(variable: dict[str, Any]) -> str:
    query = variable["query"]
    return query["query"] if isinstance(query, dict) else query  # type: ignore[no-any-return]


def promql_expressions() -> list[str]:
    """Every PromQL expression of alerts.yml (alerts and recording rules) and of the dashboard
    (panel targets, and the queries of query variables such as label_values(...))."""
    expressions = [str(rule["expr"]) for rule in _rules()]
    dashboard = _dashboard()
    expressions += [target["expr"] for panel in _panels(dashboard) for target in panel.get("targets", [])]
    expressions += [
        _variable_query(variable)
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return expressions


def _promtool(*arguments: str, cwd: Path = PROMETHEUS) -> None:
    binary = need_program("promtool", "Debian: apt-get install prometheus")
    done = subprocess.run([binary, *arguments], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"promtool {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}"


# -- alert rules -----------------------------------------------------------------------------


def test_promtool_accepts_the_alert_rules() -> None:
    _promtool("check", "rules", ALERTS.name)


def test_promtool_unit_tests_of_the_alert_rules_pass() -> None:
    _promtool("test", "rules", ALERT_TESTS.name)


def test_every_alert_is_tested_where_it_fires_and_where_it_does_not() -> None:
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    fires = {case["alertname"] for case in cases if case.get("exp_alerts")}
    stays_quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    alerts = {rule["alert"] for rule in _alerts()}
    assert alerts, "alerts.yml has no alert"
    assert not alerts - fires, f"never tested firing: {sorted(alerts - fires)}"
    assert not alerts - stays_quiet, f"never tested not firing: {sorted(alerts - stays_quiet)}"
    assert not (fires | stays_quiet) - alerts, (
        f"tests of unknown alerts: {sorted((fires | stays_quiet) - alerts)}"
    )


def test_every_alert_has_a_wait_a_severity_a_summary_a_description_and_a_runbook() -> None:
    for rule in _alerts():
        name = rule["alert"]
        assert "for" in rule, name
        assert rule.get("labels", {}).get("severity") in ("warning", "critical"), name
        annotations = rule.get("annotations", {})
        for key in ("summary", "description", "runbook"):
            assert str(annotations.get(key, "")).strip(), f"{name} has no {key}"


def test_queue_alerts_name_the_queue_and_the_value_in_their_description() -> None:
    queue_alerts = [rule for rule in _alerts() if re.search(r"\bsmq[_:]queue_", rule["expr"])]
    assert len(queue_alerts) >= 8
    for rule in queue_alerts:
        description = rule["annotations"]["description"]
        assert "$labels.queue" in description and "$value" in description, rule["alert"]


# -- dashboard -------------------------------------------------------------------------------


def test_the_dashboard_has_its_uid_and_the_datasource_and_queue_variables() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "smq-overview"
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    queue = variables["queue"]
    assert _variable_query(queue) == "label_values(smq_queue_messages_visible, queue)"
    assert queue["multi"] and queue["includeAll"]


def test_dashboard_panels_have_unique_ids_a_title_a_description_and_a_place() -> None:
    panels = list(_panels(_dashboard()))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"panel ids used twice: {sorted({i for i in ids if ids.count(i) > 1})}"
    for panel in panels:
        assert panel.get("title"), panel["id"]
        assert panel.get("description"), panel["title"]
        assert set(panel["gridPos"]) >= {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_dashboard_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        place = panel["gridPos"]
        for x in range(place["x"], place["x"] + place["w"]):
            for y in range(place["y"], place["y"] + place["h"]):
                assert (x, y) not in taken, f"{panel['title']!r} overlaps {taken[(x, y)]!r}"
                taken[(x, y)] = panel["title"]


def test_every_dashboard_panel_but_rows_queries_and_every_query_has_an_expression() -> None:
    for panel in _panels(_dashboard()):
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), panel["title"]
        for target in panel["targets"]:
            assert target.get("expr", "").strip(), panel["title"]


def test_every_dashboard_datasource_is_the_datasource_variable() -> None:
    found = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "datasource":
                    found.append(where)
                    uid = value.get("uid") if isinstance(value, dict) else value
                    assert uid == DATASOURCE, f"{where}: datasource {value!r}"
                else:
                    walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}[{index}]")

    walk(_dashboard(), "dashboard")
    assert found


def test_dashboard_queue_metrics_follow_the_queue_variable() -> None:
    for panel in _panels(_dashboard()):
        for target in panel.get("targets", []):
            for selector in re.findall(r"\bsmq_(?:queue|worker)_\w+(?:\{[^}]*\})?", target["expr"]):
                assert '{queue=~"$queue"}' in selector, f"{panel['title']}: {selector}"


def test_every_dashboard_expression_parses_as_promql(tmp_path: Path) -> None:
    rules = []
    for number, panel_target in enumerate(
        (panel["title"], target["expr"])
        for panel in _panels(_dashboard())
        for target in panel.get("targets", [])
    ):
        title, expr = panel_target
        for variable, value in _GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr.replace("$1", ""), f"{title}: a Grafana variable this test does not know"
        rules.append({"record": f"dashboard:expression_{number}:check", "expr": expr})
    (tmp_path / "dashboard.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    _promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
