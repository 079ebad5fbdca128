"""One invocation's record as one self-contained HTML file: inline CSS, inline SVG plots,
no script, no font, nothing fetched. Every string of the record goes through jinja2's
autoescape (labels, messages, reasons are the user's, or name the user's files).

    summary     command, patterns, exit code, phases, action counts by status and source
    timeline    an SVG Gantt chart: each action a bar on its lane, coloured by status
    targets     per target: its files' sizes (a bar each), validation errors at each shape
                point, test status, model_test metrics against bounds, model_benchmark
                p50 latencies against the baseline (grouped bars)
    actions     every action: status, source, time, and why an executed one ran
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import jinja2

from kiln.report.record import ActionRecord, Invocation, TargetRecord

_COLOURS = {"executed": "#3b7dd8", "cached": "#4caf50", "failed": "#d9453b"}
_WIDTH = 900  # the timeline's plot area, px
_LANE = 18  # px per lane
_LABEL = 110  # px of lane names left of the plot


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str
    css: str = ""


@dataclass(frozen=True)
class Plot:
    width: int
    height: int
    bars: tuple[Bar, ...]
    texts: tuple[tuple[float, float, str, str], ...]  # x, y, text, anchor
    lines: tuple[tuple[float, float, float, float], ...] = ()


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def timeline(record: Invocation) -> Plot | None:
    """The actions on their lanes over the invocation's time."""
    actions = record.actions
    if not actions:
        return None
    lanes = sorted({_lane(a) for a in actions}, key=_lane_order)
    end = max([a.start + a.seconds for a in actions] + [p.end for p in record.phases] + [1e-3])
    scale = _WIDTH / end
    top = 22
    bars = []
    for phase in record.phases:
        bars.append(
            Bar(
                _LABEL + phase.start * scale,
                4,
                max(1.0, (phase.end - phase.start) * scale),
                14,
                "#ddd",
                f"{phase.name}: {phase.end - phase.start:.3f}s",
                "phase",
            )
        )
    for action in actions:
        lane = lanes.index(_lane(action))
        bars.append(
            Bar(
                _LABEL + action.start * scale,
                top + lane * _LANE + 2,
                max(1.5, action.seconds * scale),
                _LANE - 4,
                _COLOURS.get(action.status, "#999"),
                f"{action.mnemonic} {action.label}: {action.status}"
                + (f" ({action.source})" if action.source else "")
                + f", {action.seconds:.3f}s"
                + (f"; {action.reason}" if action.reason else ""),
                f"action {action.status}",
            )
        )
    texts: list[tuple[float, float, str, str]] = [
        (_LABEL - 4, top + i * _LANE + 13, lane, "end") for i, lane in enumerate(lanes)
    ]
    texts.append((_LABEL - 4, 15, "phases", "end"))
    height = top + len(lanes) * _LANE + 18
    ticks = [end * i / 4 for i in range(5)]
    texts += [(_LABEL + t * scale, height - 4, f"{t:.2f}s", "middle") for t in ticks]
    return Plot(_LABEL + _WIDTH + 30, height, tuple(bars), tuple(texts))


def _lane(action: ActionRecord) -> str:
    """Its lane; an action found up to date (nothing looked up) has none: its own."""
    return action.lane or action.source or "not run"


def _lane_order(lane: str) -> tuple[str, int]:
    name, _, index = lane.rpartition("-")
    return (name, int(index)) if index.isdigit() else (lane, 0)


def size_plot(target: TargetRecord) -> Plot | None:
    """A bar per file, named: the artifacts (program, weights) where the target has any,
    else all its files; the table beside it lists every file."""
    files = [f for f in target.files if f.bytes > 0]
    artifacts = [f for f in files if f.kind in ("program", "weights")]
    files = artifacts or files
    if not files:
        return None
    largest = max(f.bytes for f in files)
    bars: list[Bar] = []
    texts: list[tuple[float, float, str, str]] = []
    width, left = 360, 230
    for i, f in enumerate(files):
        y = 4 + i * 20
        w = max(1.0, width * f.bytes / largest)
        colour = {"program": "#3b7dd8", "weights": "#e39b2d"}.get(f.kind, "#8a8a8a")
        bars.append(Bar(left, y, w, 14, colour, f"{f.path}: {f.bytes} bytes", f"size {f.kind}"))
        name = f.path.rsplit("/", 1)[-1]
        texts.append((left - 6, y + 11, name if len(name) <= 36 else "..." + name[-33:], "end"))
        texts.append((left + w + 6, y + 11, human_bytes(f.bytes), "start"))
    return Plot(left + width + 90, 8 + len(files) * 20, tuple(bars), tuple(texts))


def latency_plot(target: TargetRecord) -> Plot | None:
    """p50 (blue) beside the baseline's p50 (grey) at each shape point; the max_p50_ms
    gate as a red line where set."""
    test = target.test
    if test is None or not test.latencies:
        return None
    points = test.latencies
    values = [p.p50_ms for p in points] + [p.baseline_ms or 0 for p in points]
    values += [p.max_p50_ms or 0 for p in points]
    top = max(values) or 1.0
    height, group, left = 160, 90, 40
    scale = (height - 40) / top
    bars, texts, lines = [], [], []
    for i, p in enumerate(points):
        x = left + i * group
        h = p.p50_ms * scale
        bars.append(
            Bar(x, height - 24 - h, 28, h, "#3b7dd8", f"{p.point}: p50 {p.p50_ms:.3f} ms", "p50")
        )
        texts.append((x + 14, height - 28 - h, f"{p.p50_ms:.3g}", "middle"))
        if p.baseline_ms is not None:
            b = p.baseline_ms * scale
            bars.append(
                Bar(
                    x + 30,
                    height - 24 - b,
                    28,
                    b,
                    "#9e9e9e",
                    f"{p.point}: baseline p50 {p.baseline_ms:.3f} ms",
                    "baseline",
                )
            )
            texts.append((x + 44, height - 28 - b, f"{p.baseline_ms:.3g}", "middle"))
        if p.max_p50_ms is not None:
            y = height - 24 - p.max_p50_ms * scale
            lines.append((x - 4, y, x + 62, y))
        texts.append((x + 29, height - 8, p.point, "middle"))
    return Plot(left + len(points) * group + 20, height, tuple(bars), tuple(texts), tuple(lines))


def render(record: Invocation) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kiln.report", "templates"),
        autoescape=True,  # every template: the record's strings are the user's
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = human_bytes
    env.filters["number"] = number
    counts = Counter(a.status for a in record.actions)
    sources = Counter(a.source for a in record.actions if a.source)
    return env.get_template("report.html.j2").render(
        record=record,
        counts=counts,
        sources=sorted(sources.items()),
        timeline=timeline(record),
        colours=_COLOURS,
        size_plot=size_plot,
        latency_plot=latency_plot,
        executed=[a for a in record.actions if a.status != "cached"],
    )


def write(record: Invocation, path: Path) -> None:
    """The HTML at `path`, whole: a temp file beside it, renamed over it."""
    text = render(record)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
