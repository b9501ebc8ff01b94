"""The collection page, used as a person would: Debian's chromium (through Playwright) against a real server with
a real desktop. The person picks the built-in suite's editor task (mousepad), records, clicks and types through
the noVNC canvas, sees the actions appear, stops, finds the episode in the list, replays and verifies it; pause
leaves input out, discard deletes; refusals look alike; the page works under a base path."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import need, need_programs
from helpers import McpClient, PrefixProxy, ServerProcess, hci_envs_command, text_of

from hci_envs.recorders import load_episode

pytestmark = pytest.mark.browser

TASK = "edit-append"
INSTRUCTION = "In the text editor, add a last line saying done to notes.txt and save it."
TEXT_AREA = (640, 400)  # the middle of the screen: inside mousepad's text, below its last line
VIEWPORT = {"width": 1600, "height": 1100}
#: The replay's last screen as the page reports it: identical, or but for a blinking caret (a few pixels).
FINAL_MATCH = re.compile(r"Final screen: (identical to the recording \(100\.000%\)|nearly identical: "
                         r"99\.99\d% of pixels as recorded \(\d{1,2} pixels differ\))\.")


@pytest.fixture(scope="module")
def collect_server(x11, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    need_programs("x11vnc", "mousepad", "chromium")
    episodes = tmp_path_factory.mktemp("episodes")
    server = ServerProcess("--env", "workstation", "--episodes-dir", str(episodes))
    server.start(60)
    try:
        yield server, episodes
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "playwright (pip install 'hci-envs[test]')")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


class Desk:
    """The collection page as a person uses it: buttons, the task picker, the desktop's canvas."""

    def __init__(self, page: Any, screen: tuple[int, int] = (1280, 800)) -> None:
        from playwright.sync_api import expect

        self.page = page
        self.expect = expect
        self.screen = screen

    def open(self, url: str) -> Desk:
        self.page.goto(url)
        self.expect(self.page.locator("#desktop-status")).to_have_attribute("data-state", "connected", timeout=30000)
        self.expect(self.page.locator("#screen canvas")).to_be_visible()
        return self

    def start_task(self, task: str) -> None:
        self.expect(self.page.locator("#task-picker")).to_be_visible(timeout=20000)
        self.page.select_option("#task-select", task)
        self.page.click("#load-task")
        self.expect(self.page.locator("#load-task")).to_be_enabled(timeout=60000)  # the desktop was reset
        self.expect(self.page.locator("#error")).to_be_hidden()
        self.expect(self.page.locator("#instruction")).to_have_attribute("data-task", task)

    def at(self, x: int, y: int) -> tuple[float, float]:
        """Where the desktop's pixel (x, y) is on the page (noVNC scales the screen to fit), with the desktop
        scrolled into view first, as a person would scroll back up from the episode list."""
        canvas = self.page.locator("#screen canvas")
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        scale = box["width"] / self.screen[0]
        return box["x"] + (x + 0.5) * scale, box["y"] + (y + 0.5) * scale

    def click_desktop(self, x: int, y: int) -> None:
        px, py = self.at(x, y)
        self.page.mouse.move(px, py)  # as a person would: point, then click
        time.sleep(0.2)
        self.page.mouse.click(px, py)

    def type(self, text: str) -> None:
        self.page.keyboard.type(text, delay=40)

    def press(self, keys: str) -> None:
        self.page.keyboard.press(keys)

    def recording(self, command: str, state: str) -> None:
        self.page.click(f"#{command}")
        self.expect(self.page.locator("#rec-state")).to_have_attribute("data-state", state, timeout=20000)

    def episode(self) -> str:
        """The name of the episode the page says it is recording (or has just stopped)."""
        name = self.page.locator("#rec-state").get_attribute("data-episode")
        assert name, self.page.locator("#rec-state").inner_text()
        return name

    def actions(self) -> list[str]:
        return [text.strip() for text in self.page.locator("#actions li").all_inner_texts()]

    def wait_actions(self, count: int) -> list[str]:
        self.expect(self.page.locator("#actions li")).to_have_count(count, timeout=20000)
        return self.actions()

    def entry(self, name: str) -> Any:
        return self.page.locator(f".episode[data-name='{name}']")


@pytest.fixture
def desk(collect_server: tuple[ServerProcess, Path], browser: Any) -> Iterator[Desk]:
    server, _ = collect_server
    with server.http() as http:
        http.post("/recording", json={"command": "stop"})  # whatever a failed test left recording
        url = http.get("/state").json()["collect_url"]
    context = browser.new_context(viewport=VIEWPORT)
    try:
        yield Desk(context.new_page()).open(url)
    finally:
        context.close()


def clicked_near(shown: str, x: int, y: int) -> bool:
    """Whether the page shows a click within 2 pixels of (x, y): noVNC maps the page's whole pixels onto a
    scaled screen, so a person's click lands on the desktop pixel nearest to where they pointed."""
    match = re.fullmatch(r"click at \((\d+), (\d+)\)", shown)
    return match is not None and abs(int(match[1]) - x) <= 2 and abs(int(match[2]) - y) <= 2


def saved_notes(server: ServerProcess) -> str:
    """notes.txt in the session's home, as the agent's own bash sees it."""
    with McpClient(f"{server.base_url}/mcp") as mcp:
        return mcp.ok("bash", {"command": "cat notes.txt"}).structured_content["stdout"]


def meta(episodes: Path, name: str) -> dict[str, Any]:
    return json.loads((episodes / name / "meta.json").read_text())


# -- the whole round: task, record, actions, stop, list, replay and verify ----------------------------------------
def test_record_a_task_then_replay_and_verify_it(collect_server, desk: Desk):
    server, episodes = collect_server
    desk.start_task(TASK)
    desk.expect(desk.page.locator("#instruction")).to_have_text(INSTRUCTION)
    desk.recording("record", "recording")
    name = desk.episode()
    desk.click_desktop(*TEXT_AREA)
    (click,) = desk.wait_actions(1)
    assert clicked_near(click, *TEXT_AREA), click
    time.sleep(2.5)  # the person thinks before typing: the replay keeps this gap, which the test types into
    desk.type("done")
    desk.press("Control+s")
    assert desk.wait_actions(3) == [click, 'type "done"', "key ctrl+s"]
    desk.recording("stop", "stopped")

    entry = desk.entry(name)
    desk.expect(entry).to_be_visible()
    desk.expect(entry.locator(".info")).to_contain_text(f"task {TASK}, 3 actions, stopped")
    desk.expect(entry.locator("video")).to_be_visible(timeout=20000)  # the recorder's video of the episode
    assert meta(episodes, name)["task"] == TASK
    assert saved_notes(server) == "shopping\nmilk\nbread\ndone"

    entry.locator(".replay").click()
    banner = desk.page.locator("#banner")
    desk.expect(banner).to_have_text(f"Replaying {name}: your input is ignored until it ends.", timeout=20000)
    desk.click_desktop(*TEXT_AREA)  # a person trying to help while the replay runs is ignored
    desk.type("zzz")
    verdict = entry.locator(".report .verdict")
    desk.expect(verdict).to_have_text(FINAL_MATCH, timeout=60000)
    assert verdict.get_attribute("data-verdict") in ("identical", "nearly-identical")
    desk.expect(entry.locator(".report .check")).to_have_text(f"Task {TASK}: done (score 1).")
    entry.locator(".report details summary").click()  # the per-step matches, folded by default
    rows = entry.locator(".report table.steps tr[data-index]")
    desk.expect(rows).to_have_count(3)
    steps = [rows.nth(i).locator("td").all_inner_texts()[1:3] for i in range(3)]
    assert [step[0] for step in steps] == ["click", "type_text", "key"]
    # each screen as recorded but for the caret; typing and the save chord may share their screens
    assert all(step[1] == "shared with next" or float(step[1].rstrip("%")) >= 99.99 for step in steps), steps
    assert steps[2][1] != "shared with next", steps
    desk.expect(banner).to_be_hidden()
    assert saved_notes(server) == "shopping\nmilk\nbread\ndone"  # the replay's work, without the ignored "zzz"
    with server.http() as http:
        (viewer,) = [v for v in http.get("/control").json()["viewers"] if v["transport"] == "websocket"]
    assert viewer["dropped_messages"] > 0  # the page's own viewer: its input during the replay went nowhere

    # the people's turn again once the replay is over: their input reaches the desktop
    desk.click_desktop(*TEXT_AREA)
    desk.type("!")
    desk.press("Control+s")
    deadline = time.monotonic() + 10
    while saved_notes(server) != "shopping\nmilk\nbread\ndone!" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert saved_notes(server) == "shopping\nmilk\nbread\ndone!"

    desk.page.reload()  # the report stays with the episode
    desk.expect(desk.entry(name).locator(".report .verdict")).to_have_text(FINAL_MATCH)


def test_pause_leaves_input_out(collect_server, desk: Desk):
    _, episodes = collect_server
    desk.start_task(TASK)
    desk.recording("record", "recording")
    name = desk.episode()
    desk.click_desktop(*TEXT_AREA)
    desk.type("kept ")
    desk.recording("pause", "paused")
    desk.expect(desk.page.locator("#rec-state")).to_contain_text("Paused: what you do now is left out.")
    desk.click_desktop(*TEXT_AREA)  # the focus went to the Pause button: give it back to the desktop
    desk.type("left out ")
    desk.recording("resume", "recording")
    desk.click_desktop(*TEXT_AREA)
    desk.type("back")
    desk.press("Control+s")
    shown = desk.wait_actions(5)
    desk.recording("stop", "stopped")
    assert clicked_near(shown[0], *TEXT_AREA) and clicked_near(shown[2], *TEXT_AREA), shown
    assert [shown[1], shown[3], shown[4]] == ['type "kept "', 'type "back"', "key ctrl+s"], shown
    recorded = [json.loads(line)["action"] for line in (episodes / name / "actions.jsonl").read_text().splitlines()]
    assert [a.get("text") for a in recorded if a["type"] == "type_text"] == ["kept ", "back"]


def test_discard_stops_and_deletes_after_a_confirmation(collect_server, desk: Desk):
    _, episodes = collect_server
    desk.start_task(TASK)
    desk.recording("record", "recording")
    name = desk.episode()
    desk.click_desktop(*TEXT_AREA)
    desk.wait_actions(1)
    desk.page.once("dialog", lambda dialog: dialog.dismiss())
    desk.page.click("#discard")  # a second thought: nothing happens
    desk.expect(desk.page.locator("#rec-state")).to_have_attribute("data-state", "recording")
    assert (episodes / name).is_dir()
    desk.page.once("dialog", lambda dialog: dialog.accept())
    desk.recording("discard", "none")
    desk.expect(desk.page.locator("#actions li")).to_have_count(0)
    desk.expect(desk.entry(name)).to_have_count(0)
    assert not (episodes / name).exists()

    # a stopped episode is deleted from the list, after its own confirmation
    desk.recording("record", "recording")
    kept = desk.episode()
    desk.recording("stop", "stopped")
    desk.expect(desk.entry(kept)).to_be_visible()
    desk.page.once("dialog", lambda dialog: dialog.accept())
    desk.entry(kept).locator(".delete").click()
    desk.expect(desk.entry(kept)).to_have_count(0)
    assert not (episodes / kept).exists()


# -- review before submit ------------------------------------------------------------------------------------------
def test_a_demonstrator_trims_judges_and_submits_and_only_then_a_dataset_takes_it(collect_server, desk: Desk,
                                                                                  tmp_path):
    """A stray click before and after the work: the demonstrator keeps steps 2 to 4, says it succeeded, comments
    and submits. The steps left out, their raw input and their frames are gone from the folder; the video is
    made again; an export left the episode out before and takes its three steps after; it replays to the task's
    end and its check passes."""
    server, episodes = collect_server
    desk.start_task(TASK)
    desk.recording("record", "recording")
    name = desk.episode()
    desk.click_desktop(*TEXT_AREA)  # stray
    time.sleep(0.8)  # not a double click
    desk.click_desktop(*TEXT_AREA)
    desk.type("done")
    desk.press("Control+s")
    time.sleep(0.8)
    desk.click_desktop(*TEXT_AREA)  # stray
    desk.wait_actions(5)
    desk.recording("stop", "stopped")
    entry = desk.entry(name)
    review = entry.locator(".review")
    desk.expect(review).to_have_attribute("data-state", "pending", timeout=20000)
    desk.expect(review.locator(".review-state")).to_contain_text("Not submitted: no dataset takes it yet.")
    desk.expect(review.locator(".review-steps li")).to_have_count(5)
    before = meta(episodes, name)
    raw_before = (episodes / name / "raw" / "input.jsonl").read_text().splitlines()

    def export(folder: Path, out: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*hci_envs_command(), "export", str(folder), "--out", str(out)], capture_output=True,
                              text=True, timeout=300)

    refused = export(episodes / name, tmp_path / "before.parquet")
    assert refused.returncode != 0 and "not yet submitted by their demonstrator" in refused.stderr, refused.stderr

    desk.expect(review.locator(".submit")).to_be_disabled()  # not before a verdict
    review.locator("input.first").fill("2")
    review.locator("input.last").fill("4")
    review.locator(".verdict-yes").check()
    review.locator(".comment").fill("clean run")
    desk.page.once("dialog", lambda dialog: dialog.accept())  # "the other 2 are deleted"
    review.locator(".submit").click()
    review = desk.entry(name).locator(".review")
    desk.expect(review).to_have_attribute("data-state", "submitted", timeout=60000)
    desk.expect(review).to_contain_text("Submitted: it succeeded (“clean run”); steps 2 to 4 of 5 kept.")

    episode = load_episode(episodes / name)
    assert [a["action"]["type"] for a in episode.actions] == ["click", "type_text", "key"]
    assert [a["index"] for a in episode.actions] == [0, 1, 2]
    review_meta = episode.meta["review"]
    assert review_meta["state"] == "submitted" and review_meta["success"] is True
    assert review_meta["comment"] == "clean run" and review_meta["kept_steps"] == [1, 3]
    raw_after = (episodes / name / "raw" / "input.jsonl").read_text().splitlines()
    first_kept, last_kept = episode.actions[0]["raw"][0], episode.actions[-1]["raw"][1]
    assert len(raw_after) < len(raw_before)
    assert all(first_kept <= json.loads(line)["i"] <= last_kept for line in raw_after)  # nothing of the strays
    used = {a[k] for a in episode.actions for k in ("frame_before", "frame_after")}
    assert {f.name for f in (episodes / name / "frames").glob("*.png")} == used  # no frame of a deleted step
    assert episode.meta["video"]["file"] and episode.meta["video"] != before["video"]  # made again, of 3 steps
    assert (episodes / name / episode.meta["video"]["file"]).stat().st_size > 0

    taken = export(episodes / name, tmp_path / "after.parquet")
    assert taken.returncode == 0 and "wrote 3 steps" in taken.stdout, taken.stdout + taken.stderr
    again = httpx.post(desk.page.url + f"api/episodes/{name}/submit", json={"first": 0, "last": 0, "success": False},
                       headers={"Origin": desk.page.url.split("/collect/")[0]})
    assert again.status_code == 409 and "not waiting for review (submitted)" in again.json()["error"]["message"]

    entry = desk.entry(name)
    entry.locator(".replay").click()
    desk.expect(entry.locator(".report .check")).to_have_text(f"Task {TASK}: done (score 1).", timeout=60000)


# -- video -------------------------------------------------------------------------------------------------------
def test_an_episodes_video_plays_in_the_list(collect_server, desk: Desk, browser: Any):
    _, episodes = collect_server
    desk.start_task(TASK)
    names = []
    for _ in range(3):
        desk.recording("record", "recording")
        names.append(desk.episode())
        desk.click_desktop(*TEXT_AREA)
        desk.wait_actions(1)
        desk.recording("stop", "stopped")
    with_video, outside, plain = names
    for name in names:  # each got its video from the recorder
        got = meta(episodes, name)
        assert got.get("video"), json.dumps({k: got.get(k) for k in ("state", "end_reason", "counts", "video", "video_error")})
    mp4 = episodes / with_video / meta(episodes, with_video)["video"]["file"]
    assert mp4.name == "video.mp4" and mp4.stat().st_size > 0  # written by the recorder when it stopped
    data = meta(episodes, outside)
    data["video"] = {"file": f"../{with_video}/video.mp4", "fps": 25}  # a path out of its own folder
    (episodes / outside / "meta.json").write_text(json.dumps(data))
    data = meta(episodes, plain)
    del data["video"]  # as an episode recorded where PyAV is not installed
    (episodes / plain / "meta.json").write_text(json.dumps(data))

    desk.page.reload()
    video = desk.entry(with_video).locator("video")
    desk.expect(video).to_be_visible(timeout=20000)
    desk.expect(desk.entry(with_video).locator(".no-video")).to_have_count(0)
    deadline = time.monotonic() + 20
    while video.evaluate("v => v.readyState") < 1 and time.monotonic() < deadline:  # HAVE_METADATA
        time.sleep(0.1)
    assert video.evaluate("v => [v.readyState >= 1, v.videoWidth, v.videoHeight, v.error]") == [True, 1280, 800, None]
    desk.expect(desk.entry(plain).locator(".no-video")).to_have_text("no video")
    desk.expect(desk.entry(outside).locator(".no-video")).to_have_text("no video")

    url = desk.page.url + f"api/episodes/{with_video}/video"
    whole = httpx.get(url)
    assert whole.status_code == 200 and whole.headers["content-type"] == "video/mp4"
    assert whole.content == mp4.read_bytes()
    part = httpx.get(url, headers={"Range": "bytes=4-103"})
    assert part.status_code == 206 and part.content == whole.content[4:104]
    assert part.headers["content-range"] == f"bytes 4-103/{len(whole.content)}"
    assert httpx.get(desk.page.url + f"api/episodes/{outside}/video").json()["error"]["code"] == "EPISODE_NOT_FOUND"


# -- refusals ------------------------------------------------------------------------------------------------------
def test_wrong_secret_and_unknown_session_are_refused_alike(collect_server, browser: Any):
    server, _ = collect_server
    with server.http() as http:
        state = http.get("/state").json()
    control, view = state["vnc_secrets"]["control"], state["vnc_secrets"]["view"]
    base = server.base_url
    wrong = [f"/collect/default/{'x' * len(control)}", f"/collect/default/{view}",  # the view secret is not enough
             f"/collect/nosuchsession/{control}", f"/collect/default/{control[:-1]}"]
    answers = set()
    with httpx.Client(base_url=base, timeout=30) as http:
        for prefix in wrong:
            for method, path, body in (("GET", "/", None), ("GET", "/api/state", None),
                                       ("POST", "/api/recording", {"command": "start"}),
                                       ("POST", "/api/episodes/x/replay", {})):
                reply = http.request(method, prefix + path, json=body)
                answers.add((reply.status_code, reply.text))
        assert http.get("/recording").json()["state"] != "recording"  # nothing started
    refusal = '{"error":{"code":"UNAUTHORIZED","message":"wrong session or secret"},"detail":"wrong session or secret"}'
    assert answers == {(401, refusal)}

    page = browser.new_page()
    try:
        page.goto(f"{base}/collect/nosuchsession/{control}/")
        assert "wrong session or secret" in page.content()
    finally:
        page.close()


def test_requests_from_other_origins_and_bad_names_are_refused(collect_server):
    server, _ = collect_server
    with server.http() as http:
        url = http.get("/state").json()["collect_url"]
        # a page of another local origin (another port) or another site may not drive the desktop
        for headers in ({"Origin": "http://127.0.0.1:1"}, {"Origin": "http://localhost:1"},
                        {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
            reply = http.post(url + "api/recording", json={"command": "start"}, headers=headers)
            assert reply.status_code == 403 and reply.json()["error"]["code"] == "FORBIDDEN_ORIGIN", reply.text
        reply = http.post(url + "api/recording", content='{"command": "start"}', headers={"Content-Type": "text/plain"})
        assert reply.status_code == 400 and reply.json()["error"]["field"] == "content-type"
        assert http.get("/recording").json()["state"] != "recording"
        own = {"Origin": server.base_url, "Sec-Fetch-Site": "same-origin"}  # the page itself
        started = http.post(url + "api/recording", json={"command": "start"}, headers=own)
        assert started.status_code == 200 and started.json()["state"] == "recording", started.text
        assert http.post(url + "api/recording", json={"command": "discard"}, headers=own).json()["state"] == "none"

        for name in ("%2E%2E", ".hidden", "a%5Cb", "%2E"):
            for method in ("GET", "DELETE", "POST"):
                path = {"GET": f"api/episodes/{name}/video", "DELETE": f"api/episodes/{name}",
                        "POST": f"api/episodes/{name}/replay"}[method]
                reply = http.request(method, url + path, json={} if method == "POST" else None)
                assert reply.status_code == 400 and reply.json()["error"]["code"] == "EPISODE_NAME", (name, reply.text)
        for path in ("api/episodes/..%2F..%2Fetc/video", "api/episodes/%2Fetc%2Fpasswd/video"):
            assert http.get(url + path).status_code == 404
        reply = http.post(url + "api/episodes/not-one-of-ours/replay", json={})
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "EPISODE_NOT_FOUND"
        reply = http.post(url + "api/task", json={"task": "no-such-task"})
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "TASK_NOT_FOUND"
        reply = http.post(url + "api/task", json={"task": '{"id": "x", "instruction": "a whole spec"}'})
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "TASK_NOT_FOUND"


def test_state_and_serve_output_give_the_page_url(collect_server):
    server, _ = collect_server
    with server.http() as http:
        state = http.get("/state").json()
    control = state["vnc_secrets"]["control"]
    assert state["collect_url"] == f"{server.base_url}/collect/default/{control}/"
    assert f"record demos:              {state['collect_url']}" in "".join(server.output)
    with server.http() as http:
        page = http.get(state["collect_url"].removeprefix(server.base_url))
        assert page.status_code == 200 and "Record demonstrations" in page.text
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        bare = http.get(state["collect_url"].removeprefix(server.base_url).rstrip("/"))
        assert bare.status_code == 307 and bare.headers["location"] == f"{control}/"


# -- a base path ----------------------------------------------------------------------------------------------------
def test_the_page_works_under_a_base_path(x11, browser, tmp_path):
    """Published under /desk/ by a reverse proxy (``--public-url``): every URL of the page is relative."""
    need_programs("x11vnc", "mousepad", "chromium")
    from helpers import free_port

    port = free_port()
    with PrefixProxy(port, "/desk") as proxy:
        server = ServerProcess("--env", "workstation", "--episodes-dir", str(tmp_path), "--public-url",
                               proxy.base_url, port=port)
        with server:
            with httpx.Client(base_url=proxy.base_url + "/", timeout=30) as http:
                state = http.get("state").json()
            assert state["collect_url"].startswith(f"{proxy.base_url}/collect/default/")
            context = browser.new_context(viewport=VIEWPORT)
            try:
                desk = Desk(context.new_page()).open(state["collect_url"])
                desk.start_task(TASK)
                desk.recording("record", "recording")
                name = desk.episode()
                desk.click_desktop(*TEXT_AREA)
                desk.wait_actions(1)
                desk.recording("stop", "stopped")
                entry = desk.entry(name)
                entry.locator(".replay").click()
                desk.expect(entry.locator(".report .verdict")).to_have_text(FINAL_MATCH, timeout=60000)
            finally:
                context.close()


@pytest.mark.browser
@pytest.mark.parametrize("failures", [1, 4])
def test_a_viewer_module_that_fails_on_the_way_is_loaded_again(collect_server, browser, failures):
    """The noVNC viewer is a tree of modules: one fetch that fails (a busy machine, a reused connection closed)
    fails the whole import, and the page once said noVNC was not installed. Now it tries again, and after a few
    failures reloads itself (a page's failed modules stay failed until it is loaded again); the desktop
    connects. The failures are made with the browser's request routing: a fault that cannot be made on purpose
    with real parts."""
    server, _ = collect_server
    with server.http() as http:
        url = http.get("/state").json()["collect_url"]
    context = browser.new_context(viewport=VIEWPORT)
    left = {"count": failures}

    def flaky(route: Any) -> None:
        if left["count"] > 0:
            left["count"] -= 1
            route.abort("connectionreset")
        else:
            route.continue_()

    try:
        page = context.new_page()
        page.route("**/vnc/core/util/events.js*", flaky)
        desk = Desk(page).open(url)
        assert left["count"] == 0
        desk.expect(page.locator("#desktop-status")).to_have_text("desktop: connected")
    finally:
        context.close()


# -- the agent asks for a person: the page shows it, a person takes over, fixes and hands back ---------------------
def test_a_person_answers_the_agents_request_on_the_page(x11, browser, tmp_path):
    need_programs("x11vnc", "mousepad", "chromium")
    with ServerProcess("--env", "assisted-desktop", "--no-spare", "--episodes-dir", str(tmp_path)) as server, \
            server.http() as http:
        assert http.post("/reset", json={"task": TASK}).status_code == 200
        context = browser.new_context(viewport=VIEWPORT)
        try:
            desk = Desk(context.new_page()).open(http.get("/state").json()["collect_url"])
            page, expect = desk.page, desk.expect
            expect(page.locator("#human")).to_have_attribute("data-status", "none")
            expect(page.locator("#accept")).to_be_disabled()
            with McpClient(f"{server.base_url}/mcp") as mcp:
                mcp.ok("key", {"keys": "ctrl+End"})
                mcp.ok("type_text", {"text": "dune"})
                mcp.ok("ask_human", {"reason": "the last line should say done: please fix it and save"})
                expect(page.locator("#banner")).to_have_text(
                    "The agent asks for a person: the last line should say done: please fix it and save", timeout=10000)
                expect(page.locator("#human")).to_have_attribute("data-status", "requested")
                expect(page.locator("#human-recent li")).to_have_text(["key('ctrl+End')", "type_text('dune')"])
                page.fill("#person", "ana")
                page.click("#accept")
                expect(page.locator("#human")).to_have_attribute("data-status", "held", timeout=10000)
                expect(page.locator("#human-text")).to_contain_text("ana holds the desktop")
                expect(page.locator("#banner")).to_be_hidden()
                refused = mcp.call("type_text", {"text": "queued?"})
                assert refused.is_error and "a person (ana) holds the desktop" in text_of(refused)
                desk.click_desktop(*TEXT_AREA)  # below the last line: the caret goes to its end
                for _ in range(4):
                    desk.press("Backspace")
                desk.type("done")
                desk.press("Control+s")
                deadline = time.monotonic() + 10  # the checker reads the saved file
                while http.post("/score", json={}).json()["score"] != 1.0 and time.monotonic() < deadline:
                    time.sleep(0.2)
                page.fill("#note", "fixed the last line and saved")
                page.click("#hand-back")
                expect(page.locator("#human")).to_have_attribute("data-status", "handed_back", timeout=10000)
                expect(page.locator("#human-text")).to_contain_text("Handed back: “fixed the last line and saved”")
                told = text_of(mcp.ok("cursor_position", {}))
                assert "ana handed the desktop back with a note: 'fixed the last line and saved'" in told, told
                assert "type_text('done')" in told and "key('ctrl+s')" in told, told
            assert http.post("/score", json={}).json()["score"] == 1.0  # "done" replaced "dune", and was saved
        finally:
            context.close()


# -- propose and accept: the agent's actions wait for the person's decision on the page -----------------------------
def test_a_person_accepts_edits_and_overrides_the_agents_proposed_actions(collect_server, desk: Desk, tmp_path):
    server, episodes = collect_server
    desk.start_task(TASK)
    page, expect = desk.page, desk.expect
    page.fill("#person", "ana")
    page.check("#supervise")
    expect(page.locator("#proposal")).to_have_attribute("data-state", "on", timeout=10000)
    with server.http() as http:
        assert http.post("/recording", json={"command": "start", "source": "both", "task": TASK}).status_code == 200
        try:
            with McpClient(f"{server.base_url}/mcp") as mcp:
                results: dict = {}

                def agent(name: str, arguments: dict) -> threading.Thread:
                    thread = threading.Thread(target=lambda: results.update({name: mcp.call(name, arguments)}))
                    thread.start()
                    expect(page.locator("#proposal")).to_have_attribute("data-state", "waiting", timeout=20000)
                    return thread

                # accept: the page draws where the click would land
                thread = agent("click", {"x": TEXT_AREA[0], "y": TEXT_AREA[1]})
                expect(page.locator("#proposal-text")).to_contain_text(f"The agent proposes: click at ({TEXT_AREA[0]}, "
                                                                       f"{TEXT_AREA[1]})")
                mark = page.locator("#proposal-mark")
                expect(mark).to_be_visible()
                box, (px, py) = mark.bounding_box(), desk.at(*TEXT_AREA)
                assert abs(box["x"] + box["width"] / 2 - px) < 4 and abs(box["y"] + box["height"] / 2 - py) < 4, box
                page.click("#proposal-accept")
                thread.join(30)
                assert "ana accepted your action" in text_of(results["click"])
                # edit: a typo corrected before it runs
                thread = agent("type_text", {"text": "dune"})
                expect(page.locator("#proposal-text")).to_contain_text('The agent proposes: type "dune"')
                page.fill("#proposal-action", '{"type": "type_text", "text": "done"}')
                page.click("#proposal-edit")
                thread.join(30)
                assert "ana changed your action; this ran instead: type_text('done')" in text_of(results["type_text"])
                # override: the person saves it themselves; the agent's action never runs
                thread = agent("key", {"keys": "ctrl+q"})
                page.click("#proposal-override")
                expect(page.locator("#proposal")).to_have_attribute("data-state", "overriding", timeout=10000)
                desk.click_desktop(*TEXT_AREA)
                desk.press("Control+s")
                page.click("#proposal-done")
                thread.join(30)
                told = text_of(results["key"])
                assert "ana did something else instead of your key('ctrl+q')" in told and "key('ctrl+s')" in told, told
                # (the agent's calls, bash included, waited for the decision: now the file can be read)
                deadline = time.monotonic() + 10
                while saved_notes(server) != "shopping\nmilk\nbread\ndone" and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert saved_notes(server) == "shopping\nmilk\nbread\ndone"
                assert "Mousepad" in text_of(mcp.ok("accessibility_tree", {}))  # still there: no ctrl+q ran
        finally:
            page.uncheck("#supervise")
            expect(page.locator("#proposal")).to_have_attribute("data-state", "off", timeout=10000)
            stopped = http.post("/recording", json={"command": "stop"}).json()
    episode = load_episode(stopped["path"])
    assert [p["decision"] for p in episode.meta["proposals"]] == ["accept", "edit", "override"]
    out = tmp_path / "pairs.parquet"
    made = subprocess.run([*hci_envs_command(), "export", stopped["path"], "--out", str(out), "--format", "pairs"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and "wrote 2 preference pairs" in made.stdout, made.stdout + made.stderr


def test_the_novnc_control_page_shows_the_request_and_hands_back(x11, browser, tmp_path):
    """A person at the plain noVNC page (vnc_url) sees the agent's request, takes the desktop by using it, and
    hands it back with a note from the banner; the view-only page shows no banner."""
    need_programs("x11vnc", "mousepad", "chromium")
    with ServerProcess("--env", "assisted-desktop", "--no-spare", "--episodes-dir", str(tmp_path)) as server, \
            server.http() as http:
        assert http.post("/reset", json={"task": TASK}).status_code == 200
        state = http.get("/state").json()
        context = browser.new_context(viewport=VIEWPORT)
        try:
            control, view = context.new_page(), context.new_page()
            control.goto(state["vnc_url"])
            view.goto(state["vnc_view_url"])
            from playwright.sync_api import expect

            canvas = control.locator("#noVNC_container canvas")
            expect(canvas).to_be_visible(timeout=30000)
            banner = control.locator("#hci-envs-human")
            expect(banner).to_be_hidden()
            with McpClient(f"{server.base_url}/mcp") as mcp:
                mcp.ok("type_text", {"text": "dune"})
                mcp.ok("ask_human", {"reason": "fix the last word please"})
                expect(banner).to_be_visible(timeout=10000)
                expect(banner).to_contain_text("The agent asks for a person: “fix the last word please”")
                expect(banner).to_contain_text("type_text('dune')")
                box = canvas.bounding_box()
                control.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # takes it
                expect(banner).to_have_attribute("data-status", "held", timeout=10000)
                banner.locator("input").fill("looked, all fine")
                banner.locator("button").click()
                expect(banner).to_be_hidden(timeout=10000)
                told = text_of(mcp.ok("cursor_position", {}))
                assert "with a note: 'looked, all fine'" in told and "click(" in told, told
            assert view.locator("#hci-envs-human").count() == 0 or view.locator("#hci-envs-human").is_hidden()
        finally:
            context.close()
