"""report.html renders in a real browser (headless Chromium): verdict matrix and plots present, no console errors.

Skips only where no Chromium is installed; .ci/run installs Debian's chromium.
"""

import shutil
import subprocess

import pytest

import softaudit
from softaudit.report import write_reports

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_report_renders_in_headless_chromium(tmp_path):
    result = softaudit.audit(dtypes=["float16", "float32"], suite="quick", kind="softmax")
    write_reports(result, tmp_path, ["html"])
    page = (tmp_path / "report.html").as_uri()
    profile = tmp_path / "profile"
    run = subprocess.run(
        [BROWSER, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", page],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert 'id="verdict-matrix"' in dom and "softmax.max_shifted_f32acc" in dom
    assert dom.count("<svg") >= 4 and "error against logit scale" in dom and "What to fix" in dom
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    shot = tmp_path / "report.png"
    subprocess.run(
        [BROWSER, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,2000", page],
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 10_000
