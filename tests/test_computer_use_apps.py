"""Today's computer-use tools on real apps, checked where their effects land (issue 27): a Claude turn of the
computer toolset (``run_turn``) in chromium's text area, and OpenAI computer_calls (``run_computer_call``) that
write and format a word in a LibreOffice Writer document. The adapters' translations and wire shapes are
checked on the fake desktop (tests/test_anthropic_toolset.py, tests/test_openai_computer.py) and the loops on
mousepad (tests/test_agent_loops.py); here the apps themselves say what arrived: the page's title holds the
text area's value, and the saved document, read as the suite's checkers read it, holds the formatting.
"""

from __future__ import annotations

import base64
import io
import time
from typing import Any

import pytest
from conftest import need, need_programs
from helpers import typing_desktop, wait_until
from PIL import Image, ImageChops
from test_anthropic_toolset import png_size, use
from test_openai_computer import call, click

from hci_envs.adapters.anthropic_toolset import fit_scale, run_turn
from hci_envs.adapters.openai_computer import check_with_sdk, run_computer_call
from hci_envs.env.executor import near_action

TEXT = "héllo wörld ✓ 你好"


# -- chromium: a Claude turn ---------------------------------------------------------------------------------------
@pytest.mark.browser
def test_a_claude_turn_types_a_chord_and_zooms_in_chromium():
    need_programs("chromium")
    # A model with a smaller image budget than the screen: its screenshots are half size, so its click is mapped
    # back to the screen and its zoom comes at twice the pixels of the region it names.
    scale = fit_scale(1280, 800, max_side=640)
    assert scale == 0.5
    region = [0, 44, 100, 60]  # the text area's first line: the page starts 88 px down, under chromium's bars
    with typing_desktop("chromium") as (env, got):
        calls = [use("toolu_click", "left_click", coordinate=[320, 200]),  # the text area fills the page
                 use("toolu_type", "type", text=TEXT),
                 use("toolu_chord", "key", text="ctrl+a"),
                 use("toolu_zoom", "zoom", region=region)]
        turn = run_turn(calls, env, scale=scale)
        said = [r["content"] for r in turn.results[:3]]  # the zoom's image aside
        # the page sets its title as it gets the input: once it shows the whole text, no "a" follows it
        assert wait_until(lambda: got().startswith(TEXT), 10), (got(), said)
        assert got() == TEXT, said
        assert [(r["tool_use_id"], r["toolset_name"], "is_error" in r) for r in turn.results] == [
            (c["id"], "computer", False) for c in calls]
        clicked, typed, pressed, zoomed = (r["content"] for r in turn.results)
        assert clicked[0]["text"] == "Clicked." and typed == [{"type": "text", "text": "Typed."}]
        assert pressed == [{"type": "text", "text": "Pressed ctrl+a."}]
        [image] = zoomed
        x0, y0, x1, y1 = (round(v / scale) for v in region)
        assert png_size(image) == (x1 - x0, y1 - y0)  # the region at the screen's full resolution
        # the same pixels as the screen after the turn, at full size: nothing moves there (a selection hides the caret)
        shot = turn.observation.screenshot
        assert shot.scale == 1.0
        zoom = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).convert("RGB")
        assert zoom.tobytes() == shot.to_pil().convert("RGB").crop((x0, y0, x1, y1)).tobytes()
        # what the chord selected is all of the text: a second turn's text replaces it
        again = run_turn([use("toolu_retype", "type", text="✓ done")], env, scale=scale)
        assert again.results[0]["content"] == [{"type": "text", "text": "Typed."}]
        assert wait_until(lambda: got() == "✓ done", 10), got()


# -- LibreOffice Writer: OpenAI computer_calls -------------------------------------------------------------------
DOCUMENT = "computer-call.odt"
BOLD, PLAIN = "heavy", "light"


@pytest.fixture
def writer_env() -> Any:
    """Writer on an empty document, started as the suite starts it: its profile in the home (no first-run
    dialog, no "Keep current format?" question, no autosave), ready once its accessibility tree holds still."""
    need_programs("soffice")
    from hci_envs.desktop.a11ybus import available
    from hci_envs.tasks.spec import parse_task
    from hci_envs.tasks.suite.apps import OFFICE_SETUP, seed_files, writer
    from hci_envs.tasks.suite.office_files import odt
    from hci_envs.traits import WorkstationEnv

    need(available() is None, f"the accessibility bus: {available()}")  # Writer's readiness, and the aim below
    task = parse_task({
        "id": "computer-call-bold", "instruction": f"Write \"{BOLD} {PLAIN}\" and make \"{BOLD}\" bold.",
        "start_state": {"apps": [writer(DOCUMENT)]},
        "home_files": {**seed_files(["writer"]), DOCUMENT: {"base64": base64.b64encode(odt([""])).decode()}},
        "setup": OFFICE_SETUP,
        "checker": {"type": "document", "path": DOCUMENT,
                    "paragraphs": [{"text": f"{BOLD} {PLAIN}", "bold_spans": [BOLD]}]}})
    with WorkstationEnv() as env:
        env.reset(task=task)
        yield env


def saved(env: Any) -> Any:
    """The document as the suite's checkers read it (None while it is being written)."""
    from hci_envs.tasks.suite.writer import document

    path = env.home / DOCUMENT
    return document(path.read_bytes()) if path.exists() else None


def first_word(env: Any, before: Image.Image, after: Image.Image, said: Any = None) -> tuple[int, int]:
    """The middle of the first word typed into Writer, found as a model reading the screenshots would find it:
    in the document's area (the tree's box, which leaves out the toolbars and the status bar, whose word count
    changes too), the typed line is where the typing changed the screen, and its first word the first run of
    changed columns up to a gap as wide as a space. (The tree's paragraphs do not serve: Writer lists them
    in some runs and not in others, and their box is the page's width, not the text's.)"""
    areas: list[Any] = []

    def one_area() -> bool:
        nodes = env.call_tool("accessibility_tree", {"app": "writer"}).data["nodes"]
        areas[:] = [n["box"] for n in nodes if n["role"] == "document text"]
        return len(areas) == 1

    assert wait_until(one_area, 10), f"Writer's tree shows no one document: {areas}"
    [(x, y, width, height)] = areas
    area = (x, y, x + width, y + height)
    changed = ImageChops.difference(before.crop(area).convert("L"), after.crop(area).convert("L"))
    line = changed.point(lambda v: 255 if v > 64 else 0).getbbox()
    assert line is not None, f"the typing changed nothing in the document ({said})"
    left, top, right, bottom = line
    inked = [changed.crop((c, top, c + 1, bottom)).getextrema()[1] > 64 for c in range(left, right)]
    end = 0
    while end < len(inked) and any(inked[end:end + 3]):
        end += 1
    return x + left + end // 2, y + (top + bottom) // 2


#: Writer's grey beside the page, far from the text: a click there moves no caret and opens nothing.
INERT = (100, 500)


@pytest.mark.apps
def test_openai_calls_bold_a_word_in_writer_and_a_click_on_nothing_says_so(writer_env):
    env = writer_env
    before = env.observe().screenshot.to_pil()
    typed = run_computer_call(call({"type": "type", "text": f"{BOLD} {PLAIN}"}), env.step)
    assert [o["status"] for o in typed.outcomes] == ["ok"] and typed.note is None
    x, y = first_word(env, before, typed.observation.screenshot.to_pil(), typed.outcomes)
    formatted = run_computer_call(call({"type": "double_click", "x": x, "y": y},
                                       {"type": "keypress", "keys": ["CTRL", "B"]},
                                       {"type": "keypress", "keys": ["CTRL", "S"]}, call_id="call_2"),
                                  env.step, scale=typed.scale)
    assert [o["status"] for o in formatted.outcomes] == ["ok"] * 3 and formatted.note is None
    check_with_sdk(formatted.output)
    # ctrl+s writes the file as Writer gets to it (the suite's profile keeps its "Keep current format?" question
    # away, and an .odt never asks it): wait for the text to be on disk, then read the formatting once
    assert wait_until(lambda: (doc := saved(env)) is not None and doc.text == f"{BOLD} {PLAIN}", 30), saved(env)
    [paragraph] = saved(env).paragraphs
    assert paragraph.bold_spans == [BOLD] and not paragraph.bold, paragraph
    # The click's own call, once Writer is done repainting after the save (its whole window, for about half a
    # second): a step's landing counts what changed near the click from its start to the step's end, whatever
    # drew it, as the landing judges nearness.
    assert wait_until(lambda: not any(near_action(box, INERT) for box in
                                      env.desktop.events.changes_since(time.monotonic() - 1.0)), 20), \
        "Writer kept repainting around the spot"
    missed = run_computer_call(call(click(*INERT), call_id="call_3"), env.step, scale=formatted.scale)
    assert [o["status"] for o in missed.outcomes] == ["ok"] and missed.note is None
    landed = missed.observation.outcomes[0]["data"]["landed"]
    assert landed["screen"] in ("nothing", "elsewhere"), landed
