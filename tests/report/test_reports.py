"""Report formats: structure, escaping, atomic writes."""

import re
import xml.etree.ElementTree as ET
from html import unescape

import numpy as np

import softaudit
from softaudit._atomic import write_atomic
from softaudit.policy import Policy
from softaudit.report import annotations, write_reports


def weird(x, axis=-1):
    return np.zeros_like(x)  # every probability 0: fails


weird.__qualname__ = "weird<script>alert(1)</script>,name:x"


def test_junit_is_xunit2_with_a_suite_per_candidate_and_a_case_per_dtype_and_family(tmp_path):
    result = softaudit.audit(
        ["softaudit.candidates.softmax:max_shifted", "softaudit.candidates.softmax:max_shifted_f32acc"],
        dtypes=["float16", "float32"],
        suite="quick",
    )
    write_reports(result, tmp_path, ["junit"])
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["softmax.max_shifted", "softmax.max_shifted_f32acc"]
    shifted_cases = suites[0].findall("testcase")
    assert len(shifted_cases) == len(result.table) // 2
    assert any(c.find("failure") is not None for c in shifted_cases)
    assert all(c.find("failure") is None for c in suites[1].findall("testcase"))
    shifted = result.table[result.table.candidate == "softmax.max_shifted"]
    assert int(suites[0].get("failures")) == int((shifted.verdict == "fail").sum()) > 0
    warned = [c for c in shifted_cases if c.find("system-out") is not None]  # a warn passes and says why
    assert len(warned) == int((shifted.verdict == "warn").sum()) > 0
    assert all(c.find("failure") is None and c.find("system-out").text.startswith("warn: ") for c in warned)
    strict = softaudit.audit(
        "softaudit.candidates.softmax:max_shifted",
        dtypes=["float16", "float32"],
        suite="quick",
        policy=Policy(strict=True),
    )
    write_reports(strict, tmp_path, ["junit"])
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == int(shifted.verdict.isin(["warn", "fail"]).sum())  # strict: a warn fails


def test_candidate_text_is_escaped_in_html_and_annotations(tmp_path):
    result = softaudit.audit(weird, kind="softmax", dtypes=["float32"], suite="quick", families=["gaussian"])
    write_reports(result, tmp_path, ["html", "md"])
    html = (tmp_path / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    line = annotations(result)[0]
    title = line.split("::")[1]
    assert "%3A" in title and "%2C" in title and "<script>" in title  # properties escape : and , ; no HTML here


def test_every_command_the_html_shows_is_a_command_of_the_cli(tmp_path):
    """A reader copies what the report shows in <code>: each `softaudit WORD` there must be a real command."""
    from softaudit.cli import main

    result = softaudit.audit("softaudit.candidates.softmax:naive", dtypes=["float16"], suite="quick")
    write_reports(result, tmp_path, ["html"])
    code = [unescape(c) for c in re.findall(r"<code>(.*?)</code>", (tmp_path / "report.html").read_text(), re.S)]
    named = {m.group(1) for c in code for m in re.finditer(r"(?<![\w.])softaudit ([\w-]+)", c)}
    assert "run" in named  # the worst inputs' replay commands: the search finds what it should
    assert named <= set(main.commands), f"not commands of softaudit: {sorted(named - set(main.commands))}"


def test_github_data_escaping_of_newlines_and_percent():
    from softaudit.report.github import _escape_data, _escape_property

    assert _escape_data("50% done\nnext\r") == "50%25 done%0Anext%0D"
    assert _escape_property("a:b,c") == "a%3Ab%2Cc"


def test_atomic_writes_replace_whole_files_and_leave_no_temporaries(tmp_path):
    target = tmp_path / "sub" / "file.txt"
    write_atomic(target, "first")
    write_atomic(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.txt"]


def test_results_json_has_settings_versions_and_machine(tmp_path):
    import json

    result = softaudit.audit("softaudit.candidates.softmax:naive", dtypes=["float32"], suite="quick")
    write_reports(result, tmp_path, ["json", "csv"])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["settings"]["suite"] == "quick" and data["versions"]["numpy"] and data["machine"]["cpus"]
    assert len(data["results"]) == len(result.table)
    worst = (tmp_path / "worst.csv").read_text()
    assert "0x1." in worst  # hex floats


def test_the_gpu_line_names_a_gpu_only_where_some_row_ran_on_one(monkeypatch):
    from softaudit.report import _files

    monkeypatch.setattr(_files, "platform_key", lambda frameworks: frameworks | {"machine": "x86_64", "numpy": "2.4.6"})
    seen = {"gpu": "NVIDIA H100", "cuda": "13.0", "cudnn": 91900, "torch": "2.11"}  # (the run's, from its workers)
    assert _files.accelerator_line([None, "cpu", None], seen) == ""
    assert _files.accelerator_line([], seen) == ""
    assert (
        _files.accelerator_line(["cpu", "cuda:1"], seen) == "Ran on NVIDIA H100 (CUDA 13.0, cuDNN 91900; torch 2.11)."
    )
    assert _files.accelerator_line(["cuda"], {"torch": "2.11"}) == ""  # a device named, but no GPU seen


def test_junit_names_each_output_of_a_kind_with_several(tmp_path):
    """attention_grad's dq, dk and dv rows of one family are three testcases with three names (a CI's test view
    merges or drops testcases that share a name), each with its row's verdict."""
    result = softaudit.audit(
        "softaudit.candidates.attention_grad:naive",
        dtypes=["float32"],
        suite="quick",
        families=["attn_exact_probes"],
        isolation="none",
    )
    write_reports(result, tmp_path, ["junit"])
    names = [c.get("name") for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")]
    assert names == [f"float32 / attn_exact_probes / {output}" for output in ("dq", "dk", "dv")]
    single = softaudit.audit(
        "softaudit.candidates.softmax:naive", dtypes=["float32"], suite="quick", families=["gaussian"], isolation="none"
    )
    write_reports(single, tmp_path, ["junit"])
    assert [c.get("name") for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")] == [
        "float32 / gaussian"
    ]
