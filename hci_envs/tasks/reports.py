"""The reports of a task run: one result per task, summaries per app and per template, and report.json,
report.md and report.html with each task's final screen (and video), and for a failed task the accessibility
tree of its last observation (what an agent reading the tree saw when it stopped)."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote


@dataclass
class TaskResult:
    task: str
    score: float
    success: bool
    steps: int
    seconds: float
    details: list[str] = field(default_factory=list)
    error: str | None = None
    screenshot: str | None = None
    episode: str | None = None
    video: str | None = None  # the recorded episode's video (World(record_dir=...) with PyAV installed)
    app: str | None = None       # a suite task's app and template (hci_envs.tasks.suite)
    template: str | None = None
    tree: str | None = None      # a failed task: the outline of its last observation's accessibility tree


def _summary(results: list[TaskResult]) -> dict[str, Any]:
    n = len(results) or 1
    return {
        "tasks": len(results),
        "success_rate": round(sum(r.success for r in results) / n, 4),
        "mean_score": round(sum(r.score for r in results) / n, 4),
        "mean_steps": round(sum(r.steps for r in results) / n, 2),
        "mean_seconds": round(sum(r.seconds for r in results) / n, 3),
        "errors": sum(1 for r in results if r.error),
    }


@dataclass
class RunReport:
    results: list[TaskResult]

    def summary(self) -> dict[str, Any]:
        return _summary(self.results)

    def by(self, key: str) -> dict[str, dict[str, Any]]:
        """The summary of each group of results sharing ``key`` (``app`` or ``template``)."""
        groups: dict[str, list[TaskResult]] = {}
        for result in self.results:
            value = getattr(result, key)
            if value is not None:
                groups.setdefault(value, []).append(result)
        return {name: _summary(group) for name, group in sorted(groups.items())}

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "by_app": self.by("app"), "by_template": self.by("template"),
                "results": [asdict(r) for r in self.results]}


def write_reports(report: RunReport, out: Path) -> None:
    """report.json, report.md and report.html (each with the final screenshot of every task)."""
    data = report.to_dict()
    (out / "report.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (out / "report.md").write_text(_markdown(report, data, out), encoding="utf-8")
    (out / "report.html").write_text(_html(report, data, out), encoding="utf-8")


def _line(summary: dict[str, Any]) -> str:
    return (f"{summary['tasks']} tasks, success rate {summary['success_rate']:.0%}, mean score "
            f"{summary['mean_score']:.2f}, {summary['mean_steps']} steps and {summary['mean_seconds']:.1f}s per task "
            "on average")


def _group_rows(groups: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for name, s in groups.items():
        rows.append(f"| {name} | {s['tasks']} | {s['success_rate']:.0%} | {s['mean_score']:.2f} | "
                    f"{s['mean_steps']} | {s['mean_seconds']:.1f} |")
    return rows


def _markdown(report: RunReport, data: dict[str, Any], out: Path) -> str:
    lines = ["# Task run", "", _line(data["summary"]) + ".", ""]
    for title, groups in (("Per app", data["by_app"]), ("Per template", data["by_template"])):
        if groups:
            lines += [f"## {title}", "", "| | tasks | success | mean score | steps | seconds |", "|---|---|---|---|---|---|",
                      *_group_rows(groups), ""]
    lines += ["## Tasks", "", "| task | score | steps | seconds | details |", "|---|---|---|---|---|"]
    for r in report.results:
        details = "; ".join(r.details) + (f" ERROR {r.error}" if r.error else "")
        lines.append(f"| {r.task} | {r.score:.2f} | {r.steps} | {r.seconds:.1f} | {details.replace('|', '/')} |")
    lines.append("")
    for r in report.results:
        if r.screenshot or r.video or r.tree:
            lines += [f"### {r.task}", ""]
        if r.screenshot:
            lines += [f"![final screen of {r.task}]({r.screenshot})", ""]
        if r.video:
            lines += [f"[video of the episode]({_link(r.video, out)})", ""]
        if r.tree:
            lines += ["The last observation's accessibility tree:", "", "```", r.tree, "```", ""]
    return "\n".join(lines)


def _html(report: RunReport, data: dict[str, Any], out: Path) -> str:
    groups_html = ""
    for title, groups in (("Per app", data["by_app"]), ("Per template", data["by_template"])):
        if groups:
            rows = "".join(f"<tr><td>{_escape(name)}</td><td>{s['tasks']}</td><td>{s['success_rate']:.0%}</td>"
                           f"<td>{s['mean_score']:.2f}</td><td>{s['mean_steps']}</td><td>{s['mean_seconds']:.1f}</td></tr>"
                           for name, s in groups.items())
            groups_html += (f"<h2>{title}</h2><table><tr><th></th><th>tasks</th><th>success</th><th>mean score</th>"
                            f"<th>steps</th><th>seconds</th></tr>{rows}</table>")
    rows = []
    for r in report.results:
        image = ""
        if r.screenshot and (out / r.screenshot).exists():
            encoded = base64.b64encode((out / r.screenshot).read_bytes()).decode()
            image = f'<img alt="final screen of {_escape(r.task)}" width="480" src="data:image/png;base64,{encoded}">'
        if r.video:
            src = _escape(_link(r.video, out)).replace('"', "&quot;")
            image += (f'<br><video controls preload="metadata" width="480" src="{src}"></video>'
                      f'<br><a href="{src}">video of the episode</a>')
        if r.tree:
            image += f"<details><summary>accessibility tree</summary><pre>{_escape(r.tree)}</pre></details>"
        status = "pass" if r.success else "fail"
        rows.append(f'<tr class="{status}"><td>{_escape(r.task)}</td><td>{r.score:.2f}</td><td>{r.steps}</td>'
                    f"<td>{r.seconds:.1f}</td><td>{_escape('; '.join(r.details) + (r.error or ''))}</td>"
                    f"<td>{image}</td></tr>")
    return (
        "<!doctype html><meta charset='utf-8'><title>Task run</title>"
        "<style>body{font-family:sans-serif}td{vertical-align:top;padding:4px}.pass td:nth-child(2){color:green}"
        ".fail td:nth-child(2){color:#b00}pre{font-size:11px;max-height:400px;overflow:auto}</style>"
        f"<h1>Task run</h1><p>{_escape(_line(data['summary']))}</p>{groups_html}<h2>Tasks</h2>"
        "<table><tr><th>task</th><th>score</th><th>steps</th><th>seconds</th>"
        f"<th>details</th><th>final screen, video, tree</th></tr>{''.join(rows)}</table>"
    )


def _link(path: str, out: Path) -> str:
    """``path`` as a link from the reports in ``out``: relative, so the folders can be moved together."""
    try:
        relative = os.path.relpath(Path(path).resolve(), out.resolve())
    except ValueError:  # another drive
        relative = str(Path(path).resolve())
    return quote(relative)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
