"""--report=FILE.html on kiln build and kiln test, and `kiln report`: one self-contained
HTML file of the invocation (sizes, timeline, hits and why actions ran, test results),
checked in its DOM and in a real browser: Debian's headless Chromium loads it, takes a
screenshot and dumps the DOM it rendered.

Chromium comes from tools/chromium.sh install (apt-get, as root); where it cannot be
installed the browser test is skipped, saying why, unless KILN_REQUIRE_CHROMIUM=1 (CI:
.ci/run), where that fails it. KILN_REPORT_SCREENSHOT=PATH keeps the screenshot there, to
look at.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from tests.kiln_workspace import Workspace
from tests.unit.report.html_dom import Element, parse

REPO = Path(__file__).resolve().parents[2]
EVIL_MESSAGE = "<img src=x onerror=alert(1)>"

BUILD = """
genrule(
    name = "gen",
    srcs = ["in.txt"],
    outs = ["g.txt", "big.bin"],
    cmd = "cat $(location in.txt) > $(location g.txt); "
    + "head -c 50000 /dev/zero > $(location big.bin)",
)
sh_test(name = "pass_test", srcs = ["pass.sh"])
sh_test(name = "fail_test", srcs = ["fail.sh"])
"""


@pytest.fixture
def report_ws(ws: Workspace) -> Workspace:
    ws.write("t/BUILD", BUILD)
    ws.write("t/in.txt", "one\n")
    ws.write("t/pass.sh", "echo fine\n")
    ws.write("t/fail.sh", f"echo '{EVIL_MESSAGE}'\nexit 1\n")
    return ws


def target(dom: Element, label: str) -> Element:
    (found,) = [d for d in dom.find_all("div", "target") if d.attrs["data-label"] == label]
    return found


def test_build_report_shows_sizes_timeline_and_why_actions_ran(report_ws: Workspace) -> None:
    ws = report_ws
    first = ws.kiln("build", "//t:gen", "--report=out.html")
    assert first.code == 0, first.err
    report = ws.root / "out.html"
    assert f"INFO: Build report: {report.name}" in first.err or "Build report:" in first.err
    dom = parse(report.read_text())
    gen = target(dom, "//t:gen")
    sizes = {row[0]: row[3] for row in gen.find("table", "sizes").rows()[1:]}
    assert sizes == {"kiln-out/t/g.txt": "4", "kiln-out/t/big.bin": "50000"}
    assert len(gen.find("svg", "sizes-plot").find_all("rect")) == 2
    (bar,) = dom.find("svg", "timeline").find_all("rect", "action")
    assert "executed" in bar.classes and "Genrule //t:gen" in bar.text
    (row,) = dom.find("table", "actions").rows()[1:]
    assert row[:3] == ["//t:gen", "Genrule", "executed"]
    assert row[-1] == "new action: never built in this workspace"
    # an input changes: the reason names it; no --explain needed
    ws.write("t/in.txt", "two\n")
    assert ws.kiln("build", "//t:gen", "--report=out.html").code == 0
    (row,) = parse(report.read_text()).find("table", "actions").rows()[1:]
    assert row[-1] == "input changed: t/in.txt"
    # nothing to do: a cache hit, and no temp file left beside the report
    assert ws.kiln("build", "//t:gen", "--report=out.html").code == 0
    hit = parse(report.read_text())
    assert hit.find("table", "hits").rows()[1][:3] == ["//t:gen", "Genrule", "up-to-date"]
    assert not list(ws.root.glob(".out.html.*"))


def test_test_report_and_kiln_report_of_the_last_invocation(report_ws: Workspace) -> None:
    ws = report_ws
    run = ws.kiln("test", "//t/...", "--report=t.html")
    assert run.code == 3, run.err
    text = (ws.root / "t.html").read_text()
    assert EVIL_MESSAGE not in text  # what a test printed never becomes markup
    dom = parse(text)
    statuses = {
        label: target(dom, label).find("span", "status").text
        for label in ("//t:pass_test", "//t:fail_test")
    }
    assert statuses == {"//t:pass_test": "PASSED", "//t:fail_test": "FAILED"}
    assert "kiln-testlogs/t/fail_test/test.log" in target(dom, "//t:fail_test").text
    assert "Failed (exit code 3)" in dom.text
    rows = {r[0]: r for r in dom.find("table", "actions").rows()[1:]}
    assert (
        rows["//t:fail_test"][2] == "failed" and "exited with code 1" in rows["//t:fail_test"][-1]
    )
    # kiln report renders the record the test kept: the same page, nothing rebuilt
    again = ws.kiln("report", "again.html")
    assert again.code == 0, again.err
    assert (ws.root / "again.html").read_text() == text
    assert "actions" not in again.err.split("INFO: Build report")[0]  # no build ran


def test_report_errors_are_one_line_before_any_work(ws: Workspace) -> None:
    ws.write("t/BUILD", 'genrule(name = "g", outs = ["g.txt"], cmd = "echo > $@")\n')
    none = ws.kiln("report")
    assert none.code == 1 and "no build or test of this workspace has been recorded" in none.err
    folder = ws.kiln("build", "//t:g", "--report=t")
    assert folder.code == 1 and "--report=t is a directory" in folder.err
    missing = ws.kiln("build", "//t:g", "--report=nowhere/r.html")
    assert missing.code == 1 and "the folder nowhere does not exist" in missing.err
    assert not (ws.root / "kiln-out").exists()  # refused before loading
    # a build that fails at loading still leaves its report, with the error
    ws.write("t/BUILD", "genrule(\n")
    broken = ws.kiln("build", "//t:g", "--report=r.html")
    assert broken.code == 1
    dom = parse((ws.root / "r.html").read_text())
    assert "Failed (exit code 1)" in dom.text and dom.find("ul", "errors").text.strip()


# -- a real browser ------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """tools/chromium.sh install: the binary, or a skip (a failure under CI) saying why."""
    done = subprocess.run(
        [str(REPO / "tools/chromium.sh"), "install"],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        why = f"chromium cannot be installed: {done.stderr.strip()}"
        if os.environ.get("KILN_REQUIRE_CHROMIUM"):
            pytest.fail(f"{why} (KILN_REQUIRE_CHROMIUM)")
        pytest.skip(why)
    return done.stdout.strip().splitlines()[-1]


def _browse(binary: str, page: Path, tmp: Path, *args: str) -> str:
    """Run headless Chromium on `page`; its stdout. The whole process group is killed at
    the end, however it ends, and none of it is left running."""
    argv = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}",
        *args,
        page.as_uri(),
    ]
    env = {**os.environ, "HOME": str(tmp)}
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: renderers, zygotes and all
    )
    try:
        out, err = process.communicate(timeout=120)
    finally:
        _kill_group(process.pid)
        process.wait()
    assert process.returncode == 0, err[-3000:]
    return out


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while _running_in_group(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running_in_group(pgid), "chromium left processes running"


def _running_in_group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def _png(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


def test_chromium_renders_the_report(report_ws: Workspace, chromium: str, tmp_path: Path) -> None:
    ws = report_ws
    assert ws.kiln("build", "//t:gen").code == 0
    run = ws.kiln("test", "//t/...", "--report=t.html")
    assert run.code == 3, run.err
    page = ws.root / "t.html"
    shot = Path(os.environ.get("KILN_REPORT_SCREENSHOT", tmp_path / "report.png"))
    _browse(chromium, page, tmp_path, "--window-size=1280,1600", f"--screenshot={shot}")
    width, height, pixels = _png(shot)
    assert (width, height) == (1280, 1600)
    assert shot.stat().st_size > 20_000  # text, tables and bars, not a blank page
    assert len(set(pixels)) > 50
    dom = parse(_browse(chromium, page, tmp_path, "--dump-dom"))
    # the DOM the browser built holds the figures
    timeline = dom.find("svg", "timeline")
    assert len(timeline.find_all("rect", "action")) == 3  # the genrule (a hit), two tests
    assert len(timeline.find_all("rect", "failed")) == 1
    gen = target(dom, "//t:gen")
    assert {r[0]: r[3] for r in gen.find("table", "sizes").rows()[1:]}["kiln-out/t/big.bin"] == (
        "50000"
    )
    assert target(dom, "//t:fail_test").find("span", "status").text == "FAILED"
    assert not dom.find_all("img")  # the test's output stayed text
    assert EVIL_MESSAGE not in "".join(e.tag for e in dom.iter())
