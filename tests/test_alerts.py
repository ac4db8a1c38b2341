"""The chart's alert rules (charts/ckptbench/alerts/ckptbench.rules.yaml) with a real promtool:
`promtool check rules` on the file, `promtool test rules` on its unit tests
(tests/alerts/ckptbench.test.yaml), and the chart's PrometheusRule holding that same file.

promtool comes with Debian's `prometheus` package (scripts/setup.sh installs it); under CI=true
its absence fails these tests instead of skipping them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_chart import (
    exported_series_names,
    find_helm,
    promql_metric_names,
    run_helm,
    template_args,
)
from tests.tools import find_tool

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "charts" / "ckptbench" / "alerts" / "ckptbench.rules.yaml"
UNIT_TESTS = ROOT / "tests" / "alerts" / "ckptbench.test.yaml"
# What the issue asked the rules to catch, by alert name.
EXPECTED_ALERTS = {
    "CkptbenchBenchmarkFailed",
    "CkptbenchReconcileErrors",
    "CkptbenchBenchmarkPendingTooLong",
    "CkptbenchBenchmarkStalled",
    "CkptbenchDataAcceleratorUtilizationBelowFloor",
}


@pytest.fixture(scope="module")
def promtool() -> str:
    return find_tool(
        "promtool",
        "promtool not installed: scripts/setup.sh installs Debian's 'prometheus' package",
    )


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=60, check=False, cwd=cwd
    )


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_check_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", str(UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_alert_on_what_was_asked_and_each_has_a_unit_test() -> None:
    names = {rule["alert"] for rule in rules()}
    assert names == EXPECTED_ALERTS
    tested: dict[str, set[bool]] = {}
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            tested.setdefault(check["alertname"], set()).add(bool(check["exp_alerts"]))
    # Each alert is shown both to fire and to stay quiet.
    assert tested == {name: {True, False} for name in names}


def test_alerts_use_only_series_the_operator_exports() -> None:
    exported = exported_series_names()
    for rule in rules():
        names = promql_metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= exported, f"{rule['alert']}: {sorted(names - exported)} not exported"


@pytest.mark.parametrize(
    ("alert", "change"),
    [
        ("CkptbenchBenchmarkFailed", ('phase="Failed"', 'phase="Succeeded"')),
        ("CkptbenchReconcileErrors", ("for: 15m", "for: 1m")),
        ("CkptbenchBenchmarkPendingTooLong", ('phase="Pending"', 'phase=~"Pending|Queued"')),
        ("CkptbenchBenchmarkStalled", ('phase="Running"} == 1', 'phase="Running"} >= 0')),
        ("CkptbenchDataAcceleratorUtilizationBelowFloor", ("au_passed == 0", "au_passed == 1")),
        (
            "CkptbenchDataAcceleratorUtilizationBelowFloor",
            ('phase="Succeeded"} == 1', 'phase="Succeeded"} >= 0'),
        ),
    ],
)
def test_the_unit_tests_catch_a_changed_rule(
    promtool: str, tmp_path: Path, alert: str, change: tuple[str, str]
) -> None:
    """The unit tests against a copy of the rules with one rule broken must fail."""
    text = RULES.read_text()
    start = text.index(f"- alert: {alert}")
    end = text.find("- alert:", start + 1)
    end = len(text) if end < 0 else end
    old, new = change
    assert old in text[start:end]
    broken = text[:start] + text[start:end].replace(old, new) + text[end:]
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(broken)
    (tmp_path / "tests").mkdir()
    unit = yaml.safe_load(UNIT_TESTS.read_text())
    unit["rule_files"] = [f"../rules/{RULES.name}"]
    (tmp_path / "tests" / "unit.yaml").write_text(yaml.safe_dump(unit))
    result = run(promtool, "test", "rules", "unit.yaml", cwd=tmp_path / "tests")
    assert result.returncode != 0, result.stdout
    assert alert in result.stdout + result.stderr


def test_chart_prometheus_rule_holds_the_rules_file() -> None:
    helm = find_helm()
    sets = ["prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus-stack"]
    result = run_helm(helm, *template_args(sets))
    assert result.returncode == 0, result.stderr
    (rule,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


RUNBOOKS = ROOT / "docs" / "runbooks.md"


def runbook_sections() -> dict[str, str]:
    """docs/runbooks.md's sections by their GitHub anchor (a heading lowercased: the alert names
    have no spaces or punctuation), each with its text."""
    sections: dict[str, str] = {}
    anchor = None
    for line in RUNBOOKS.read_text().splitlines():
        if line.startswith("## "):
            anchor = line[3:].strip().lower()
            sections[anchor] = ""
        elif anchor is not None:
            sections[anchor] += line + "\n"
    return sections


def test_each_alert_links_its_runbook_under_the_charts_home() -> None:
    """Every alert's runbook_url is its own section of docs/runbooks.md, under Chart.yaml's home,
    and the section holds diagnosis steps (a numbered list), not a heading alone."""
    home = yaml.safe_load((ROOT / "charts" / "ckptbench" / "Chart.yaml").read_text())["home"]
    sections = runbook_sections()
    for rule in rules():
        anchor = rule["alert"].lower()
        url = rule["annotations"].get("runbook_url")
        assert url == f"{home}/blob/main/docs/runbooks.md#{anchor}", rule["alert"]
        assert anchor in sections, f"docs/runbooks.md has no section {rule['alert']}"
        steps = [line for line in sections[anchor].splitlines() if line[:3] in ("1. ", "2. ")]
        assert len(steps) == 2, f"{rule['alert']}: its runbook has no numbered steps"
