"""The Grafana dashboard the chart ships, checked as Grafana would read it (no Grafana here).

- no two panels overlap (Grafana would push one down, away from where the JSON puts it);
- every query filters on the ``cluster`` variable, so one Grafana over several clusters' series
  (Thanos, Mimir, a federation) shows one cluster at a time; with a single cluster and no
  ``cluster`` label, its "All" (``.*``) matches every series;
- throughput in GiB/s, as the status, ``ckptbench run`` and its CSV show it, and every byte
  quantity in IEC units;
- the JSON fits Grafana's own types (grafana-foundation-sdk's dashboard, panel and query models,
  see tests/grafana_schema.py).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.models import units as grafana_units

from ckptbench.workload.contract.checkpoint.sizes import GIB
from tests import grafana_schema

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "ckptbench" / "dashboards" / "ckptbench.json"
GRID_WIDTH = 24  # Grafana's dashboard grid has 24 columns
CLUSTER_MATCHER = 'cluster=~"$cluster"'
# A metric selector of ours and its label matchers, if any.
SELECTOR = re.compile(r"\b(ckptbench_\w+)\s*(\{[^}]*\})?")


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


# ---- layout ---------------------------------------------------------------------------------


def overlaps(data: dict[str, Any]) -> list[str]:
    """Pairs of panels whose gridPos rectangles share a cell, and panels off the grid."""
    found = []
    placed = [(p["title"], p["gridPos"]) for p in grafana_schema.panels(data)]
    for title, pos in placed:
        if pos["x"] < 0 or pos["w"] <= 0 or pos["h"] <= 0 or pos["x"] + pos["w"] > GRID_WIDTH:
            found.append(f"{title!r} is off the {GRID_WIDTH}-column grid: {pos}")
    for (a, p), (b, q) in itertools.combinations(placed, 2):
        apart = (
            p["x"] + p["w"] <= q["x"]
            or q["x"] + q["w"] <= p["x"]
            or p["y"] + p["h"] <= q["y"]
            or q["y"] + q["h"] <= p["y"]
        )
        if not apart:
            found.append(f"{a!r} {p} overlaps {b!r} {q}")
    return found


def test_no_two_panels_overlap() -> None:
    assert overlaps(load()) == []


def test_the_overlap_check_sees_the_panels_the_issue_found() -> None:
    """The phases panels at y=43, h=8 sat over the sweep bar chart (y=35, h=10)."""
    data = load()
    by_title = {p["title"]: p for p in data["panels"]}
    by_title["Save phases per benchmark"]["gridPos"]["y"] = by_title[
        "Sweep cells: save and load throughput"
    ]["gridPos"]["y"]
    assert any("Save phases per benchmark" in o for o in overlaps(data))


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in grafana_schema.panels(load())]
    assert len(ids) == len(set(ids)), sorted(ids)


# ---- the cluster variable -------------------------------------------------------------------


def queries(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) of every panel query and every query variable."""
    found = [
        (f"panel {p['title']!r}", t["expr"])
        for p in grafana_schema.panels(data)
        for t in p.get("targets", [])
    ]
    for variable in data["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append((f"variable {variable['name']}", query.get("query", query)))
    return found


def selectors_without_cluster(data: dict[str, Any]) -> list[str]:
    missing = []
    for where, expr in queries(data):
        if where == "variable cluster":
            continue  # lists the clusters themselves
        for match in SELECTOR.finditer(expr):
            if CLUSTER_MATCHER not in (match.group(2) or ""):
                missing.append(f"{where}: {match.group(0)}")
    return missing


def test_cluster_variable_lists_clusters_and_defaults_to_all() -> None:
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    cluster = variables["cluster"]
    assert re.fullmatch(r"label_values\(ckptbench_\w+, cluster\)", cluster["query"]["query"])
    assert cluster["includeAll"] is True and cluster["allValue"] == ".*"
    assert cluster["current"]["value"] == ["$__all"]
    # Declared before the variables whose queries use it (Grafana resolves them in order).
    names = list(variables)
    assert names.index("cluster") < min(names.index(n) for n in ("namespace", "benchmark"))


def test_every_query_filters_on_the_cluster() -> None:
    data = load()
    assert len(queries(data)) >= 20
    assert selectors_without_cluster(data) == []


def test_the_cluster_check_sees_a_query_without_it() -> None:
    data = load()
    target = data["panels"][1]["targets"][0]
    target["expr"] = target["expr"].replace(CLUSTER_MATCHER + ", ", "")
    assert selectors_without_cluster(data)


# ---- units ----------------------------------------------------------------------------------

UNIT_NAMES = {
    value: name
    for name, value in vars(grafana_units).items()
    if isinstance(value, str) and not name.startswith("_")
}


def units_of(panel: dict[str, Any]) -> list[str]:
    field_config = panel.get("fieldConfig", {})
    found = [field_config.get("defaults", {}).get("unit")]
    for override in field_config.get("overrides", []):
        found += [p["value"] for p in override["properties"] if p["id"] == "unit"]
    return [u for u in found if u is not None]


def test_every_unit_is_a_grafana_unit_and_bytes_are_iec() -> None:
    """The SDK's names for units say which are 1024-based: BytesIEC, Gibibytes, ... (the
    SI ones are BytesSI, Gigabytes, GigabytesPerSecond, ...)."""
    for panel in grafana_schema.panels(load()):
        for unit in units_of(panel):
            assert unit in UNIT_NAMES, f"{panel['title']!r}: {unit!r} is no Grafana unit"
            name = UNIT_NAMES[unit]
            if "byte" in name.lower():
                iec = "ibi" in name or name.endswith("IEC")
                assert iec, f"{panel['title']!r}: {unit!r} ({name}) is not an IEC unit"


def gib_per_second_problems(data: dict[str, Any]) -> list[str]:
    """Each query of a bytes-per-second series must divide by 1 GiB, and its panel show GiB/s
    (a table: the column it becomes)."""
    problems = []
    for panel in grafana_schema.panels(data):
        for target in panel.get("targets", []):
            if "_bytes_per_second" not in target["expr"]:
                continue
            title = panel["title"]
            if not re.search(rf"\)?\s*/\s*{GIB}\s*$", target["expr"]):
                problems.append(f"{title!r} {target['refId']}: not divided by {GIB}")
            if panel["type"] != "table":
                if panel["fieldConfig"]["defaults"].get("unit") != "GiBs":
                    problems.append(f"{title!r}: unit is not GiBs")
                continue
            renames = {}
            for step in panel.get("transformations", []):
                renames.update(step.get("options", {}).get("renameByName", {}))
            column = renames.get(f"Value #{target['refId']}", "")
            units = [
                p["value"]
                for o in panel["fieldConfig"]["overrides"]
                for p in o["properties"]
                if p["id"] == "unit" and _matches(o["matcher"], column)
            ]
            if "GiB/s" not in column or units != ["GiBs"]:
                problems.append(f"{title!r} {target['refId']}: column {column!r} units {units}")
    return problems


def _matches(matcher: dict[str, Any], column: str) -> bool:
    if matcher["id"] == "byName":
        return bool(matcher["options"] == column)
    if matcher["id"] == "byRegexp":
        return re.fullmatch(matcher["options"], column) is not None
    return False


def test_throughput_is_shown_in_gib_per_second() -> None:
    data = load()
    throughput_queries = [e for _, e in queries(data) if "_bytes_per_second" in e]
    assert len(throughput_queries) >= 5
    assert gib_per_second_problems(data) == []


@pytest.mark.parametrize("mutation", ["si-unit", "not-divided", "table-column"])
def test_the_unit_check_sees_bytes_per_second_in_si(mutation: str) -> None:
    data = load()
    by_title = {p["title"]: p for p in data["panels"]}
    if mutation == "si-unit":
        by_title["Save throughput per benchmark"]["fieldConfig"]["defaults"]["unit"] = "Bps"
    elif mutation == "not-divided":
        target = by_title["Load throughput per benchmark"]["targets"][0]
        target["expr"] = target["expr"].replace(f" / {GIB}", "")
    else:
        table = by_title["Checkpoint size vs time"]
        table["fieldConfig"]["overrides"][-1]["properties"][0]["value"] = "Bps"
    assert gib_per_second_problems(data)


# ---- Grafana's schema -----------------------------------------------------------------------


def test_dashboard_fits_grafanas_published_types() -> None:
    assert grafana_schema.problems(load()) == []


MUTATIONS = {
    "misspelt gridPos": lambda d: d["panels"][1].update(gridpos=d["panels"][1].pop("gridPos")),
    "height as text": lambda d: d["panels"][1]["gridPos"].update(h="8"),
    "legend mode": lambda d: d["panels"][1]["options"]["legend"].update(displayMode="grid"),
    "draw style": lambda d: d["panels"][1]["fieldConfig"]["defaults"]["custom"].update(
        drawStyle="dots"
    ),
    "tooltip sync": lambda d: d.update(graphTooltip=7),
    "query key": lambda d: d["panels"][1]["targets"][0].update(fomat="table"),
    "panel type": lambda d: d["panels"][1].update(type="timeseriez"),
    "variable refresh": lambda d: d["templating"]["list"][1].update(refresh=9),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_schema_check_refuses_what_grafana_would_not_read(name: str) -> None:
    data = copy.deepcopy(load())
    MUTATIONS[name](data)
    assert grafana_schema.problems(data), name
