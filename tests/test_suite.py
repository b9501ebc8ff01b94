"""The real-application suite: every template solvable by its oracle (1.0) and worth nothing untouched (0.0),
on the real apps, several desktops at once; the suite's breadth; its reports; its tasks over the wire."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import need_programs

from hci_envs.tasks import NoopAgent, OracleAgent, World
from hci_envs.tasks.suite import suite, templates

#: Desktops the suite runs on at once (each task on one); CI machines have two cores.
SESSIONS = int(os.environ.get("HCI_ENVS_SUITE_SESSIONS", "3"))
PROGRAMS = {"editor": "mousepad", "writer": "soffice", "calc": "soffice", "browser": "chromium",
            "files": "pcmanfm", "calculator": "galculator", "terminal": "xterm"}


@pytest.mark.fake
def test_the_suite_is_broad_and_every_seed_draws_a_distinct_task():
    every = templates()
    assert len(every) >= 60, len(every)
    apps = {t.app for t in every.values()}
    assert len(apps) >= 6, apps
    assert any(len(t.apps) > 1 for t in every.values()), "no multi-app template"
    assert sum(t.long for t in every.values()) >= 3, "fewer than three long templates"
    tasks = suite(seeds=range(5))
    drawn = {json.dumps([t.instruction, t.checker.model_dump(), {k: str(v) for k, v in t.home_files.items()}],
                        sort_keys=True) for t in tasks}
    assert len(drawn) >= 300, len(drawn)
    assert [t.id for t in suite(seeds=[3])] == [f"{name}.3" for name in every]
    again = {t.id: t for t in suite(seeds=[3])}
    assert all(again[t.id] == t for t in suite(seeds=[3])), "a template and seed must give the same task"


@pytest.mark.fake
def test_a_template_task_is_named_by_any_seed_and_solved_by_the_oracle_agent():
    from hci_envs.tasks.suite import oracle_script, template_task

    task = template_task("editor-sort-lines.123456")
    assert task is not None and task.template == "editor-sort-lines" and task.seed == 123456
    assert callable(oracle_script(task))
    assert template_task("no-such-template.1") is None and template_task("editor-sort-lines.x") is None


@pytest.fixture(scope="module")
def world(x11):
    for program in sorted(set(PROGRAMS.values())):
        need_programs(program)
    with World(suite(seeds=[0]), sessions=SESSIONS) as world:
        yield world


@pytest.mark.apps
@pytest.mark.timeout(1200)  # two runs over every template: a hang guard sized for that work on a busy machine
def test_every_template_scores_zero_untouched_and_one_with_its_oracle(world, tmp_path):
    nothing = world.run(NoopAgent(), report_dir=tmp_path / "noop", progress=False)
    scored = [(r.task, r.score, r.details) for r in nothing.results if r.score != 0.0 or r.error]
    assert not scored, scored
    solved = world.run(OracleAgent(), report_dir=tmp_path / "oracle", progress=False)
    failed = [(r.task, r.score, r.error, r.details) for r in solved.results if r.score != 1.0 or not r.success]
    assert not failed, failed
    report = json.loads((tmp_path / "oracle" / "report.json").read_text())
    assert set(report["by_app"]) == {t.app for t in templates().values()}
    assert all(s["success_rate"] == 1.0 for s in report["by_template"].values())
    # the do-nothing run's report keeps, for each failed task, the tree of its last observation
    failed_report = json.loads((tmp_path / "noop" / "report.json").read_text())
    trees = [r["tree"] for r in failed_report["results"] if r["app"] in ("writer", "browser", "editor")]
    assert trees and all(t and t.startswith("accessibility tree:") for t in trees)
    assert "accessibility tree" in (tmp_path / "noop" / "report.html").read_text()


@pytest.mark.apps
def test_a_suite_task_over_the_wire_scores_on_the_server(x11):
    need_programs("mousepad")
    from helpers import ServerProcess

    from hci_envs import HciEnvClient

    with ServerProcess("--tasks", "apps", "--no-vnc") as server, HciEnvClient(server.base_url) as env:
        obs = env.reset(task="editor-append-line.77")
        assert "notes.txt" in obs.observation.text
        assert env.score()["score"] == 0.0
        task = suite(seeds=[77], ids=("editor-append-line",))[0]
        wanted = task.checker.equals
        env.step({"type": "key", "keys": "ctrl+End"})
        env.step({"type": "type_text", "text": wanted.rsplit("\n", 2)[-2] + "\n", "mode": "keys"})
        env.step({"type": "key", "keys": "ctrl+s"})
        env.step({"type": "wait", "ms": 800})
        result = env.score()
        assert result["score"] == 1.0 and result["success"], result


@pytest.mark.fake
def test_reports_group_by_app_and_template(tmp_path: Path):
    from hci_envs.tasks import RunReport, TaskResult, write_reports

    results = [TaskResult("a.0", 1.0, True, 3, 1.0, app="calc", template="a"),
               TaskResult("a.1", 0.5, False, 9, 2.0, app="calc", template="a", tree="accessibility tree: 2 elements"),
               TaskResult("b.0", 0.0, False, 1, 3.0, app="browser", template="b")]
    write_reports(RunReport(results), tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["by_app"]["calc"] == {"tasks": 2, "success_rate": 0.5, "mean_score": 0.75, "mean_steps": 6.0,
                                      "mean_seconds": 1.5, "errors": 0}
    assert data["by_template"]["b"]["success_rate"] == 0.0
    markdown = (tmp_path / "report.md").read_text()
    assert "## Per app" in markdown and "| calc | 2 | 50% | 0.75 |" in markdown
    assert "accessibility tree: 2 elements" in markdown


@pytest.mark.fake
@pytest.mark.parametrize("ready_after_ms", [0, 700, 30_000, 59_000])
def test_an_oracles_wait_costs_few_steps_however_long_the_app_takes(ready_after_ms):
    """Each of an oracle's waits is a step of the task's budget (templates have 25 to 80): waiting a minute for an
    app on a loaded machine must leave most of it for the work."""
    from hci_envs.errors import ActionTimeoutError
    from hci_envs.tasks.suite.common import until

    waited = [0]
    steps = until(lambda: waited[0] >= ready_after_ms and "ready", "the app", timeout=60)
    count = 0
    try:
        while True:
            waited[0] += next(steps)["ms"]
            count += 1
    except StopIteration as done:
        assert done.value == "ready"
    assert waited[0] <= max(ready_after_ms * 1.5, 200) + 1 and count <= 21, (waited, count)
    slept: list[int] = []
    with pytest.raises(ActionTimeoutError, match="waited 60s for never"):
        for step in until(lambda: False, "never", timeout=60):
            slept.append(step["ms"])
    assert sum(slept) == 60_000 and len(slept) <= 21  # not a moment past its timeout


class _ScriptedScreen:
    """The test seam for oracles' moves (a stand-in for a desktop's accessibility tree, not a desktop): each look
    at the tree reads the next of ``trees`` (the last one stays), so a test says what the app shows, and when."""

    def __init__(self, trees: list[list[dict]], titles: list[list[str]] | None = None) -> None:
        self.trees, self.titles = trees, titles or [[]]
        self.accessibility = self

    def tree(self, _query, remember=False):  # noqa: ARG002 - the accessibility backend's signature
        from types import SimpleNamespace

        return SimpleNamespace(nodes=self.trees.pop(0) if len(self.trees) > 1 else self.trees[0], left_out=[])

    def window_titles(self) -> list[str]:
        return self.titles.pop(0) if len(self.titles) > 1 else self.titles[0]


def _moves(oracle_part, screen: _ScriptedScreen) -> list[dict]:
    """The actions a part of an oracle yields against ``screen`` (waits included, batches flattened), until it
    ends."""
    from types import SimpleNamespace

    moves: list[dict] = []
    for step in oracle_part(SimpleNamespace(env=SimpleNamespace(desktop=screen))):
        moves.extend(step if isinstance(step, list) else [step])
    return moves


@pytest.mark.fake
def test_oracles_wait_for_the_focus_and_the_page_before_they_type():
    """An app may handle a click or a key later than X delivers it (Writer, Chromium on a loaded machine): the
    suite's oracles type only once the tree shows the field focused, and act on a page only once its window says
    the page has come."""
    from hci_envs.tasks.suite.browser import ADDRESS_BAR, go_to
    from hci_envs.tasks.suite.common import click_into
    from hci_envs.tasks.suite.writer import select_line

    box = {"role": "text", "name": "", "text": "12 pt", "box": [500, 90, 40, 20], "states": ["editable"]}
    focused = {**box, "states": ["editable", "focused"]}
    moves = _moves(lambda ctx: click_into(ctx, box, app="writer"), _ScriptedScreen([[box], [box], [box], [focused]]))
    assert moves[0]["type"] == "click" and [m["type"] for m in moves[1:]] == ["wait"] * 3

    line = {"role": "paragraph", "text": "Second line", "states": ["focused"]}
    chosen = {**line, "states": ["focused", "selected"]}
    moves = _moves(lambda ctx: select_line(ctx, 1, "Second line"), _ScriptedScreen([[line], [chosen]]))
    assert [m["type"] for m in moves] == ["key"] * 4 + ["wait"]  # ctrl+Home, Down, Home, shift+End, then a look

    bar = {"role": "entry", "name": ADDRESS_BAR, "states": []}
    screen = _ScriptedScreen([[bar], [{**bar, "states": ["focused"]}]],
                             titles=[["Corner Shop - Chromium"], ["127.0.0.1:80/p.html - Chromium"],
                                     ["Teapot details - Chromium"]])
    moves = _moves(lambda ctx: go_to(ctx, "http://127.0.0.1:80/p.html", "Teapot details"), screen)
    kinds = [m["type"] for m in moves]
    assert kinds == ["key", "wait", "type_text", "wait", "key", "wait", "wait"], kinds
    # ctrl+l, a look until the bar has the focus, the address, Return, and looks until the title is the page's
    assert len(screen.trees) == 1 and len(screen.titles) == 1  # each was looked at, not slept through
