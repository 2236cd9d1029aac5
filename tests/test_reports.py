"""The renderers (markdown, SARIF, JUnit) on hand-built reports, checked against
the official SARIF 2.1.0 schema and the Jenkins JUnit XSD (tests/data/)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from builder import A, G, seed000_folded

from qflow.analysis import analyze_graph
from qflow.report import KINDS, Finding, Report, render_junit, render_markdown, render_sarif

DATA = Path(__file__).parent / "data"
MODEL = Path(__file__).resolve().parents[1] / "qflow" / "examples" / "models.py"


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(DATA / "junit-10.xsd"))


def failing(source: str | None = f"{MODEL}:132") -> Report:
    """Seed 000's folded shape: cat claims int16 while it copies int8 codes."""
    g = seed000_folded()
    r = analyze_graph(g.dg, name="seed000 partition 0")
    [f] = r.findings
    f.source = source
    return r


def passing() -> Report:
    g = G()
    g.fact("mul", A)
    g.passthrough("cat", "mul", claim=A)
    g.use("cat", "add", A)
    return analyze_graph(g.dg, name="control")


def unproven() -> Report:
    """An unknown op in the way: a warning, obligation unproven."""
    g = G()
    g.fact("conv", A)
    g.free("mystery", blocking=True)
    g.dg.add_use("conv", "mystery", "args[0]")
    g.use("mystery", "linear", A)
    return analyze_graph(g.dg, name="unknown")


def test_hand_built_reports_have_the_expected_shape() -> None:
    assert [f.kind for f in failing().findings] == ["passthrough-domain-change"]
    assert passing().proved and not passing().findings
    assert [(f.kind, f.severity, f.status) for f in unproven().findings] == [("unknown-op", "warning", "unproven")]


# -- SARIF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [failing, passing, unproven])
def test_sarif_validates_against_the_official_schema(make, sarif_validator) -> None:
    log = render_sarif(make())
    sarif_validator.validate(log)
    json.dumps(log)  # JSON-ready


def test_sarif_validates_for_several_reports_in_one_run(sarif_validator) -> None:
    log = render_sarif([failing(), passing(), unproven()])
    sarif_validator.validate(log)
    [run] = log["runs"]  # GitHub rejects several runs of one tool in one upload
    assert [r["ruleId"] for r in run["results"]] == ["passthrough-domain-change", "unknown-op"]
    assert [(p["name"], p["proved"]) for p in run["properties"]["reports"]] == [
        ("seed000 partition 0", False),
        ("control", True),
        ("unknown", False),
    ]


def test_sarif_driver_and_rules_cover_every_kind() -> None:
    import qflow

    driver = render_sarif(passing())["runs"][0]["tool"]["driver"]
    assert driver["name"] == "qflow" and driver["version"] == qflow.__version__
    rules = {r["id"]: r for r in driver["rules"]}
    assert set(rules) == set(KINDS)
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for k in KINDS.values():
        r = rules[k.id]
        assert r["shortDescription"]["text"] == k.title
        assert r["fullDescription"]["text"] == k.explanation
        assert r["help"]["text"] == k.fix
        assert r["defaultConfiguration"]["level"] == levels[k.severity]


def test_sarif_result_names_rule_node_and_source_line(tmp_path) -> None:
    log = render_sarif(failing(), base=MODEL.parents[2])
    run = log["runs"][0]
    [res] = run["results"]
    assert res["ruleId"] == "passthrough-domain-change" and res["level"] == "error"
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    assert "cat" in res["message"]["text"]
    [loc] = res["locations"]
    phys = loc["physicalLocation"]
    assert phys["artifactLocation"] == {"uri": "qflow/examples/models.py", "uriBaseId": "%SRCROOT%"}
    assert phys["region"] == {"startLine": 132}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == MODEL.parents[2].as_uri() + "/"
    [logical] = loc["logicalLocations"]
    assert logical["name"] == "cat" and logical["fullyQualifiedName"] == "seed000 partition 0::cat"
    props = res["properties"]
    assert props["status"] == "violated" and "module" in props
    assert props["produced"]["dtype"] == "int8" and props["expected"]["dtype"] == "int16"


def test_sarif_source_outside_the_base_stays_absolute(tmp_path) -> None:
    [res] = render_sarif(failing(), base=tmp_path)["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": str(MODEL)}


def test_sarif_without_source_is_located_at_the_program_file(tmp_path, sarif_validator) -> None:
    """GitHub rejects a result that has only a logical location: fall back to the .pt2."""
    prog = tmp_path / "models" / "net.pt2"
    r = failing(source=None)
    log = render_sarif(r, artifacts={r.name: str(prog)}, base=tmp_path)
    sarif_validator.validate(log)
    [res] = log["runs"][0]["results"]
    phys = res["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"]["uri"] == "models/net.pt2" and "region" not in phys
    # no artifact known: the report name stands for the program
    [res] = render_sarif(r)["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "seed000%20partition%200"


def test_sarif_fingerprint_is_stable_when_lines_move() -> None:
    a = render_sarif(failing(f"{MODEL}:132"))["runs"][0]["results"][0]
    b = render_sarif(failing(f"{MODEL}:140"))["runs"][0]["results"][0]
    assert a["partialFingerprints"] == b["partialFingerprints"]


def test_sarif_maps_info_to_note(sarif_validator) -> None:
    r = passing()
    r.findings.append(Finding("domain-mismatch", "x", "info", "just so you know", status="predicted"))
    log = render_sarif(r)
    sarif_validator.validate(log)
    assert log["runs"][0]["results"][0]["level"] == "note"


def test_empty_sarif_is_valid(sarif_validator) -> None:
    log = render_sarif([])
    sarif_validator.validate(log)
    assert log["runs"][0]["results"] == []


# -- JUnit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [failing, passing, unproven])
def test_junit_validates_against_the_xsd(make, junit_schema) -> None:
    junit_schema.validate(render_junit(make()))


def test_junit_failing_report_has_a_failing_testcase(junit_schema) -> None:
    text = render_junit([failing(), passing(), unproven()])
    junit_schema.validate(text)
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["seed000 partition 0", "control", "unknown"]
    bad, good, unk = suites
    [case] = bad.findall("testcase")
    assert (case.get("classname"), case.get("name")) == ("passthrough-domain-change", "cat")
    fail = case.find("failure")
    assert fail is not None and "cat" in fail.get("message") and "produced" in fail.text
    assert (bad.get("tests"), bad.get("failures"), bad.get("errors")) == ("1", "1", "0")
    [ok] = good.findall("testcase")
    assert ok.get("name") == "obligations" and ok.find("failure") is None
    assert "2 proved, 0 violated, 0 unproven" in ok.find("system-out").text
    assert (good.get("tests"), good.get("failures")) == ("1", "0")
    [warn] = unk.findall("testcase")  # warnings fail too
    assert warn.get("classname") == "unknown-op" and warn.find("failure") is not None
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")


def test_junit_info_finding_passes_but_an_unproved_report_still_fails(junit_schema) -> None:
    r = unproven()
    r.findings = [Finding("unknown-op", "mystery", "info", "an info finding", status="unproven")]
    text = render_junit(r)
    junit_schema.validate(text)
    suite = ET.fromstring(text).find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["mystery"].find("failure") is None
    assert cases["obligations"].find("failure") is not None  # not proved: the XML does not pass it
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")


# -- Markdown ------------------------------------------------------------------------------------


def test_markdown_failing_report_has_table_and_details() -> None:
    md = render_markdown(failing(), base=MODEL.parents[2])
    assert "| program | form | verdict | proved | violated | unproven | findings |" in md
    assert "| seed000 partition 0 | folded | ❌ NOT PROVED | 2 | 1 | 0 | 1 error |" in md
    assert "<code>passthrough-domain-change</code> at <code>cat</code>" in md
    assert "| produced | int8 scale=0.1 zp=102 [-128,127] |" in md
    assert "| expected | int16 scale=3.05185e-05 zp=0 [-32767,32767] |" in md
    assert "`qflow/examples/models.py:132`" in md
    assert "**Fix:** Keep an explicit requantize" in md


def test_markdown_passing_report() -> None:
    md = render_markdown([passing()])
    assert md.startswith("### qflow: 1 program proved")
    assert "| control | folded | ✅ PROVED | 2 | 0 | 0 | — |" in md
    assert "Findings" not in md


def test_markdown_escapes_table_cells_and_caps_details() -> None:
    r = failing()
    r.name = "a|b <x>"
    r.findings = r.findings * 5
    md = render_markdown(r, max_details=2)
    assert "| a\\|b &lt;x&gt; |" in md
    assert md.count("<details>") == 2 and "… and 3 more finding(s)" in md


def test_report_package_does_not_import_torch() -> None:
    code = "import sys, qflow.report as r; r.render_sarif([]); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_validators_do_reject_bad_output(sarif_validator, junit_schema) -> None:
    """Guard against a schema that accepts anything (wrong draft, empty XSD)."""
    log = render_sarif(failing())
    log["runs"][0]["results"][0]["level"] = "info"  # not a SARIF level
    with pytest.raises(jsonschema.ValidationError):
        sarif_validator.validate(log)
    root = ET.fromstring(render_junit(failing()))
    del root.find("testsuite").attrib["tests"]
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        junit_schema.validate(ET.tostring(root, encoding="unicode"))
