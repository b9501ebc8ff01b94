"""The agent's hand-over to a person (hci_envs.env.handover): its states and deadlines, and what the environment
does with it: the agent's input refused (never queued) while a person was asked or holds the desktop, its `wait`
ended when the desktop comes back, and its next result carrying the person's note, what they did and a fresh
screen, once."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from hci_envs.env.assembly import EnvironmentHooks
from hci_envs.env.handover import Handover
from hci_envs.errors import ConfigError, HandoverError, HumanControlError, InvalidActionError


class Clock:
    """The declared test seam of the hand-over's deadlines: a clock that moves when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.fake
def test_a_request_is_taken_by_one_person_and_handed_back_with_a_note_told_once():
    clock = Clock()
    handover = Handover(answer_within=60, hold_for=600, clock=clock)
    heard = []
    handover.observers.append(lambda event, record: heard.append((event, record.outcome)))
    assert handover.status() == {"status": "none"} and handover.agent_blocked() is None
    handover.request("the save dialog wants a folder I cannot see", [{"action": "click(1, 2)"}])
    assert "you asked for a person" in handover.agent_blocked() and not handover.agent_may_act()
    with pytest.raises(HandoverError, match="already asked"):
        handover.request("again")
    with pytest.raises(HandoverError, match="nothing to hand back"):
        handover.hand_back("too early")
    handover.accept("ana")
    with pytest.raises(HandoverError, match="ana has already taken"):
        handover.accept("bo")
    with pytest.raises(HandoverError, match="ana holds the desktop, not bo"):
        handover.hand_back("mine", person="bo")
    assert handover.status()["status"] == "held" and "a person (ana) holds" in handover.agent_blocked()
    assert handover.take_report() is None  # nothing to tell while it runs
    handover.hand_back("saved it in ~/Documents", [{"type": "click", "x": 5, "y": 6},
                                                    {"type": "type_text", "text": "report"}], person="ana")
    assert handover.agent_blocked() is None and handover.agent_may_act()
    report = handover.take_report()
    assert "ana handed the desktop back" in report and "saved it in ~/Documents" in report
    assert "click(5, 6)" in report and "type_text('report')" in report and "(2 actions)" in report
    assert handover.take_report() is None  # once
    status = handover.status()
    assert status["status"] == "handed_back" and status["note"] == "saved it in ~/Documents"
    assert status["recent_actions"] == [{"action": "click(1, 2)"}] and len(status["actions"]) == 2
    assert heard == [("requested", None), ("accepted", None), ("handed_back", "handed_back")]


@pytest.mark.fake
def test_nobody_answering_ends_the_request_at_its_deadline_and_a_hold_ends_at_its_own():
    clock = Clock()
    handover = Handover(answer_within=60, hold_for=600, clock=clock)
    handover.request("stuck")
    clock.now += 59.9
    assert handover.agent_blocked() is not None
    clock.now += 0.2
    assert handover.agent_blocked() is None  # checked when asked: no timer had to run
    assert handover.status()["status"] == "unanswered"
    assert "Nobody answered" in handover.take_report()
    with pytest.raises(HandoverError, match="nothing to accept"):
        handover.accept("late")
    handover.request("stuck again")
    handover.accept("ana")
    clock.now += 600
    assert handover.agent_blocked() is None and handover.status()["outcome"] == "hold_time_over"
    assert "ran out" in handover.take_report()


@pytest.mark.fake
def test_bad_requests_are_typed_errors():
    handover = Handover()
    for reason in ("", "   ", None):
        with pytest.raises(ConfigError, match="needs a reason"):
            handover.request(reason)
    with pytest.raises(ConfigError, match="must be text"):
        handover.request(42)
    with pytest.raises(ConfigError, match="at most 2000"):
        handover.request("x" * 2001)
    with pytest.raises(ConfigError, match="answer_within must be a positive"):
        Handover(answer_within=0)


@pytest.mark.fake
def test_a_deadline_found_by_a_refused_call_is_still_told():
    """An accept or a hand back that finds the deadline passed is refused, and the observers (the VNC side, the
    recorder) still hear that the hand-over ended: nothing stays granted to people."""
    clock = Clock()
    handover = Handover(answer_within=60, hold_for=600, clock=clock)
    heard = []
    handover.observers.append(lambda event, record: heard.append(event))
    handover.request("stuck")
    handover.accept("ana")
    clock.now += 601
    with pytest.raises(HandoverError, match="nothing to hand back"):
        handover.hand_back("late")
    assert heard == ["requested", "accepted", "hold_time_over"]
    handover.request("again")
    clock.now += 61
    with pytest.raises(HandoverError, match="nothing to accept"):
        handover.accept("late")
    assert heard[-2:] == ["requested", "unanswered"]


@pytest.mark.fake
def test_observers_hear_each_hand_over_in_order_when_calls_race():
    handover = Handover()
    heard: dict[int, list[str]] = {}
    records = []  # kept alive: an id is a record's only while it lives

    def hear(event: str, record: object) -> None:
        records.append(record)
        heard.setdefault(id(record), []).append(event)

    handover.observers.append(hear)
    for _ in range(200):
        handover.request("race")
        accepted = threading.Event()

        def take() -> None:
            handover.accept("ana")
            accepted.set()

        def give_back() -> None:
            accepted.wait(5)
            handover.hand_back("done")

        threads = [threading.Thread(target=take), threading.Thread(target=give_back)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(heard) == 200 and all(events == ["requested", "accepted", "handed_back"] for events in heard.values())


def _env(people: str | None = "the test"):
    from hci_envs.traits import AssistedDesktopEnv

    return AssistedDesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                              hooks=EnvironmentHooks(people=people), human_answer_within=30, human_hold_for=60)


@pytest.mark.fake
def test_nobody_to_answer_is_said_at_once():
    with _env(people=None) as env:
        env.reset()
        with pytest.raises(HandoverError, match="no person can answer here"):
            env.call_tool("ask_human", {"reason": "help"})
        assert env.state.human == {"status": "none"}


@pytest.mark.fake
def test_the_agent_is_paused_while_a_person_works_and_told_what_they_did():
    with _env() as env:
        env.reset()
        env.call_tool("click", {"x": 10, "y": 10})
        env.call_tool("type_text", {"text": "draft"})
        asked = env.call_tool("ask_human", {"reason": "which folder?"})
        assert "asked for a person" in asked.text and env.state.human["status"] == "requested"
        assert [a["action"] for a in env.state.human["recent_actions"]] == ["click(10, 10)", "type_text('draft')"]
        typed = env.desktop.typed
        for call in (lambda: env.call_tool("type_text", {"text": "queued?"}),
                     lambda: env.executor.run({"type": "click", "x": 1, "y": 1})):
            with pytest.raises(HumanControlError, match="you asked for a person"):
                call()
        obs = env.step({"type": "key", "keys": "ctrl+s"})  # a step's input is refused the same way
        assert obs.error["code"] == "HUMAN_CONTROL" and obs.metadata["human"]["status"] == "requested"
        shot = env.call_tool("screenshot", {})
        assert shot.images and "[human] you asked for a person" in shot.text  # looks still work, and say so
        env.handover.accept("ana")
        # the agent waits; the person hands back after 0.3 s, and the wait ends then, not after its 20 s
        threading.Timer(0.3, lambda: env.handover.hand_back("done: saved", [{"type": "key", "keys": "ctrl+s"}])).start()
        start = time.monotonic()
        waited = env.call_tool("wait", {"ms": 20000})
        assert time.monotonic() - start < 10 and "the desktop is yours again" in waited.text
        assert "ana handed the desktop back with a note: 'done: saved'" in waited.text
        assert "key('ctrl+s')" in waited.text and waited.images  # the report, with a fresh screen
        assert env.desktop.typed == typed  # nothing the agent sent while paused arrived later
        again = env.call_tool("type_text", {"text": "!"})
        assert "[human]" not in again.text and env.desktop.typed == typed + "!"  # told once; the agent is back
        assert env.state.human["status"] == "handed_back"


@pytest.mark.fake
def test_a_wait_ends_when_nobody_answered_in_time():
    from hci_envs.traits import AssistedDesktopEnv

    with AssistedDesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                            hooks=EnvironmentHooks(people="nobody"), human_answer_within=0.5) as env:
        env.reset()
        env.call_tool("ask_human", {"reason": "anyone?"})
        start = time.monotonic()
        waited = env.call_tool("wait", {"ms": 10000})
        assert time.monotonic() - start < 5, waited.text
        assert "Nobody answered your request ('anyone?') in time" in waited.text
        env.call_tool("click", {"x": 1, "y": 1})  # the agent's again


@pytest.mark.fake
def test_the_agents_clock_stands_still_while_it_waits_for_people_only_if_asked():
    running, paused = Clock(), Clock()
    plain = Handover(answer_within=60, hold_for=100, clock=running)
    stopping = Handover(answer_within=60, hold_for=100, pause_clock=True, clock=paused)
    for clock in (running, paused):
        clock.now += 10
    assert plain.agent_clock() == stopping.agent_clock() == 1010
    for handover, clock in ((plain, running), (stopping, paused)):
        handover.request("help")
        clock.now += 30
        handover.accept("ana")
        clock.now += 20
        handover.hand_back("done")
        clock.now += 5
    assert plain.agent_clock() == 1065 and stopping.agent_clock() == 1015  # the 50 s with people do not count
    # nobody answering: the pause ends at the request's deadline, not when someone noticed it had passed
    stopping.request("anyone?")
    paused.now += 500
    assert stopping.agent_clock() == 1015 + 500 - 60 and stopping.current == "unanswered"
    # a hold past its time, the same; a reset (cancel) ends a pause at once
    stopping.request("hold it")
    stopping.accept("bo")
    paused.now += 300
    assert stopping.agent_clock() == 1455 + 300 - 100
    stopping.request("then reset")
    paused.now += 7
    stopping.cancel()
    paused.now += 1
    assert stopping.agent_clock() == 1655 + 1


@pytest.mark.fake
@pytest.mark.parametrize("pause", [False, True])
def test_a_steps_deadline_counts_the_time_with_a_person_unless_the_clock_pauses(pause):
    from hci_envs.traits import AssistedDesktopEnv

    with AssistedDesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                            hooks=EnvironmentHooks(people="the test"), pause_clock_for_people=pause) as env:
        env.reset()
        env.call_tool("ask_human", {"reason": "take a while"})
        env.handover.accept("ana")
        back = threading.Timer(1.5, lambda: env.handover.hand_back("took my time"))
        back.start()
        start = time.monotonic()
        obs = env.step({"type": "wait", "ms": 20000}, timeout_s=0.5)
        took = time.monotonic() - start
        back.join()
        if pause:  # the wait ended when the desktop came back, its 0.5 s not spent
            assert obs.error is None and 1.4 < took < 10, (obs.error, took)
        else:  # cut at 0.5 s, while the person still held the desktop
            assert obs.error["code"] == "TIMEOUT" and took < 1.4, (obs.error, took)
        # after the hand-over, the deadline runs again in either case
        start = time.monotonic()
        cut = env.step({"type": "wait", "ms": 5000}, timeout_s=0.3)
        assert cut.error["code"] == "TIMEOUT" and time.monotonic() - start < 3


@pytest.mark.fake
def test_while_paused_nothing_that_could_drive_the_desktop_runs():
    """A shell, an interpreter, CodeAct: each could move the pointer (xdotool), so each is refused while a person
    was asked; looks go on. After the hand back, a CodeAct call carries the report (not the tool its code called)."""
    from hci_envs.traits import AsksForHelp, WorkstationEnv

    class AssistedWorkstation(AsksForHelp, WorkstationEnv):
        pass

    with AssistedWorkstation(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                             hooks=EnvironmentHooks(people="the test")) as env:
        env.reset()
        env.call_tool("ask_human", {"reason": "help"})
        for name, arguments in (("bash", {"command": "xdotool mousemove 3 3"}), ("python", {"code": "print(1)"}),
                                ("execute_code", {"code": "print(1)"})):
            with pytest.raises(HumanControlError, match="you asked for a person"):
                env.call_tool(name, arguments)
        assert env.call_tool("screen_size", {}).data["width"] == 320
        env.handover.accept("ana")
        env.handover.hand_back("all yours")
        out = env.call_tool("execute_code", {"code": "print(screen_size())"})
        assert "ana handed the desktop back with a note: 'all yours'" in out.text, out.text
        assert "[human]" not in env.call_tool("screen_size", {}).text  # told once


@pytest.mark.fake
def test_a_reset_forgets_the_agents_last_actions():
    with _env() as env:
        env.reset()
        env.call_tool("type_text", {"text": "the old episode's secret"})
        env.call_tool("wait", {"ms": 1})
        env.reset()
        env.call_tool("click", {"x": 2, "y": 2})
        env.call_tool("ask_human", {"reason": "help"})
        assert [a["action"] for a in env.state.human["recent_actions"]] == ["click(2, 2)"]


@pytest.mark.fake
def test_a_reset_ends_a_hand_over_without_a_report():
    with _env() as env:
        env.reset()
        env.call_tool("ask_human", {"reason": "help"})
        env.reset()
        assert env.state.human == {"status": "none"}
        assert "[human]" not in env.call_tool("click", {"x": 3, "y": 3}).text


# -- real parts: mousepad, an agent over MCP, a person over VNC, the recorder -----------------------------------
@pytest.mark.x11
def test_an_agent_asks_a_person_fixes_and_hands_back_and_the_episode_keeps_the_correction(x11, tmp_path):
    """The agent types a typo into mousepad and asks for help; its input is refused while it waits; a person over
    native VNC takes the desktop by typing (fixes the line, saves) and hands back with a note; the agent's wait
    ends then, and its result carries the note, the person's actions and a fresh screen. The recorded episode has
    the agent's attempt, the person's correction and the agent's rest, exports them apart and as a preference
    pair, and replays to the same file."""
    from conftest import need_programs
    from helpers import McpClient, ServerProcess, hci_envs_command, text_of
    from rfb_client import RfbClient

    from hci_envs.plugins import load_env_class
    from hci_envs.recorders import load_episode, replay_episode
    from hci_envs.recorders.segments import preference_pairs, step_segments
    from hci_envs.tasks import BUILTIN, load_tasks

    need_programs("x11vnc", "mousepad")
    episodes = tmp_path / "episodes"
    with ServerProcess("--env", "assisted-desktop", "--vnc-port", "0", "--no-spare", "--episodes-dir", str(episodes),
                       "--human-answer-within", "120") as server, server.http() as http:
        assert http.post("/reset", json={"task": "edit-append"}).status_code == 200
        state = http.get("/state").json()
        assert state["human"] == {"status": "none"}
        assert http.post("/recording", json={"command": "start", "source": "both", "task": "edit-append"}
                         ).status_code == 200
        with McpClient(f"{server.base_url}/mcp") as mcp:
            mcp.ok("key", {"keys": "ctrl+End"})
            mcp.ok("type_text", {"text": "dune"})
            asked = mcp.ok("ask_human", {"reason": "I typed dune; the last line should say done. Fix it and save?"})
            assert "asked for a person" in text_of(asked)
            refused = mcp.call("type_text", {"text": "queued?"})
            assert refused.is_error and "you asked for a person" in text_of(refused)
            human = http.get("/human").json()
            assert human["status"] == "requested"
            assert "type_text('dune')" in [a["action"] for a in human["recent_actions"]]

            waited: dict = {}

            def agent_waits() -> None:
                start = time.monotonic()
                waited["result"] = mcp.call("wait", {"ms": 60000})
                waited["seconds"] = time.monotonic() - start

            waiter = threading.Thread(target=agent_waits)
            waiter.start()
            person = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
            try:  # the first input takes the desktop
                for _ in range(4):
                    person.tap(0xFF08)  # BackSpace
                for char in "done":
                    person.tap(ord(char))
                person.key(0xFFE3, True)
                person.tap(ord("s"))
                person.key(0xFFE3, False)
                deadline = time.monotonic() + 20
                while http.get("/human").json().get("person") is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                held = http.get("/human").json()
                assert held["status"] == "held" and held["person"].startswith("viewer "), held
                time.sleep(1.0)
                back = http.post("/human", json={"command": "hand_back", "note": "fixed the typo and saved"})
                assert back.status_code == 200, back.text
                waiter.join(timeout=60)
                # the person's viewer is still connected and their pointer passes over the view: the desktop is
                # the agent's at once, not after the takeover timeout
                person.pointer(300, 300)
                person.pointer(320, 310)
                time.sleep(0.3)
                assert not mcp.call("mouse_move", {"x": 5, "y": 5}).is_error
                assert http.get("/control").json()["holder"] == "agent"
            finally:
                person.close()
            waiter.join(timeout=60)
            result = waited["result"]
            text = text_of(result)
            assert waited["seconds"] < 50 and "the desktop is yours again" in text, text
            assert "with a note: 'fixed the typo and saved'" in text and "type_text('done')" in text, text
            assert "key('ctrl+s')" in text and any(c.type == "image" for c in result.content), text
            assert http.post("/human", json={"command": "hand_back"}).status_code == 409  # nothing held now

            # a second request, two people race to take it: one wins, the other is told who has it
            mcp.ok("ask_human", {"reason": "just checking"})
            with ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(lambda who: http.post("/human", json={"command": "accept", "person": who}),
                                        ("ana", "bo")))
            assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
            loser = next(a for a in answers if a.status_code == 409).json()
            winner = next(a for a in answers if a.status_code == 200).json()["person"]
            assert loser["error"]["code"] == "HANDOVER" and f"{winner} has already taken" in loser["error"]["message"]
            http.post("/human", json={"command": "hand_back", "note": "nothing to do"}).raise_for_status()
            after = mcp.ok("cursor_position", {})
            assert "handed the desktop back with a note: 'nothing to do'" in text_of(after)
            assert "(0 actions)" in text_of(after)
            mcp.ok("key", {"keys": "ctrl+s"})  # the agent finishes
        scored = http.post("/score", json={}).json()
        assert scored["score"] == 1.0, scored
        stopped = http.post("/recording", json={"command": "stop"}).json()

    episode = load_episode(stopped["path"])
    segments = step_segments(episode)
    sources = [s["source"] for s in episode.actions]
    assert [h["outcome"] for h in episode.meta["handovers"]] == ["handed_back", "handed_back"]
    assert episode.meta["handovers"][0]["note"] == "fixed the typo and saved"
    assert "recent_actions" not in episode.meta["handovers"][0]  # typed text lives in the steps, masked there
    # the agent's attempt, the person's correction, the agent's rest: in that order, each by its actor
    runs = [seg for n, seg in enumerate(segments) if n == 0 or seg != segments[n - 1]]
    # then the agent's wait for the person (written when it ended), the mouse move after the hand back (the
    # attempt before the second request, in which nobody acted) and the agent's last key
    assert runs == ["attempt", "correction", "agent", "attempt", "agent"], (runs, list(zip(segments, sources)))
    assert [a["action"]["type"] for a in episode.actions if a["source"] == "agent"][-3:] == ["wait", "mouse_move",
                                                                                             "key"]
    assert all((seg == "correction") == (src == "human") for seg, src in zip(segments, sources))
    (pair,) = preference_pairs(episode)
    assert pair["rejected"] == {"type": "type_text", "text": "dune"} and pair["chosen"]["type"] == "key"
    # the exports select the segments, and write the pair, as datasets read them back
    import datasets

    for args, rows in ((["--segments", "correction"], segments.count("correction")),
                       (["--segments", "attempt,correction", "--format", "sft", "--images", "none"], 1),
                       (["--format", "pairs"], 1)):
        out = tmp_path / f"{args[-1]}.parquet"
        made = subprocess.run([*hci_envs_command(), "export", stopped["path"], "--out", str(out), *args],
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stdout + made.stderr
        assert len(datasets.Dataset.from_parquet(str(out))) == rows, args
    steps = datasets.Dataset.from_parquet(str(tmp_path / "correction.parquet"))
    assert set(steps["segment"]) == {"correction"} and set(steps["source"]) == {"human"}
    pairs = datasets.Dataset.from_parquet(str(tmp_path / "pairs.parquet"))
    assert json.loads(pairs[0]["rejected"])["text"] == "dune" and "fixed the typo" in pairs[0]["prompt"]
    refused = subprocess.run([*hci_envs_command(), "export", stopped["path"], "--out", str(tmp_path / "x.parquet"),
                              "--segments", "typo"], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "segments are agent, attempt, correction, human" in refused.stderr
    assert "Traceback" not in refused.stderr

    # it replays to the same file, in the task's world
    spec = next(t for t in load_tasks(BUILTIN) if t.id == "edit-append")
    with load_env_class(episode.meta["env"])() as env:
        env.reset(task=spec)
        report = replay_episode(episode, env=env, reset=False, compare=False)
        assert report.summary()["errors"] == 0, report.to_dict()
        assert env.score().value == 1.0


@pytest.mark.x11
def test_a_server_whose_clock_pauses_for_people_answers_a_step_when_the_desktop_is_back(x11):
    """serve --pause-clock-for-people: a step's timeout_s (and the server's guard after it) leave out the time a
    person held the desktop; the step answers when it is back, not at its timeout."""
    from conftest import need_programs
    from helpers import McpClient, ServerProcess

    need_programs("x11vnc")
    with ServerProcess("--env", "assisted-desktop", "--vnc-port", "0", "--no-spare", "--app", "xterm",
                       "--pause-clock-for-people") as server, server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        with McpClient(f"{server.base_url}/mcp") as mcp:
            mcp.ok("ask_human", {"reason": "hold on"})
        http.post("/human", json={"command": "accept", "person": "ana"}).raise_for_status()
        with ThreadPoolExecutor(1) as pool:
            start = time.monotonic()
            stepping = pool.submit(http.post, "/step", json={"action": {"type": "wait", "ms": 30000},
                                                             "timeout_s": 1})
            time.sleep(4)  # the person holds the desktop for longer than the step's timeout and its grace
            assert not stepping.done()
            http.post("/human", json={"command": "hand_back", "note": "there"}).raise_for_status()
            reply = stepping.result(timeout=30)
            took = time.monotonic() - start
        assert reply.status_code == 200, reply.text
        observation = reply.json()["observation"]
        assert observation.get("error") is None and 4 < took < 20, (observation.get("error"), took)
        assert "handed the desktop back with a note: 'there'" in observation["text"]
        cut = http.post("/step", json={"action": {"type": "wait", "ms": 30000}, "timeout_s": 1}).json()
        assert cut["observation"]["error"]["code"] == "TIMEOUT"  # the agent's own time runs again


# -- propose and accept ----------------------------------------------------------------------------------------------
def _supervised(decide_within: float = 30):
    from hci_envs.traits import DesktopEnv

    return DesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                      supervise=True, decide_within=decide_within)


def _proposed(env, call):
    """Run the agent's ``call`` in a thread; return the thread's result holder once its proposal waits."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while env.supervision.current() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert env.supervision.current() is not None, "no proposal came"
    out["thread"] = thread
    return out


@pytest.mark.fake
def test_a_person_accepts_edits_or_overrides_each_proposed_action():
    with _supervised() as env:
        env.reset()
        waiting = _proposed(env, lambda: env.call_tool("type_text", {"text": "draft"}))
        proposal = env.supervision.current()
        assert proposal.action == {"type": "type_text", "text": "draft"} and env.desktop.typed == ""
        assert env.state.supervision["proposal"]["action"]["text"] == "draft"
        env.supervision.decide(proposal.id, "accept", person="ana")
        waiting["thread"].join(10)
        assert "[human] ana accepted your action" in waiting["result"].text and env.desktop.typed == "draft"

        waiting = _proposed(env, lambda: env.call_tool("type_text", {"text": "teh"}))
        proposal = env.supervision.current()
        with pytest.raises(InvalidActionError):  # an edit is checked like any action: the proposal still waits
            env.supervision.decide(proposal.id, "edit", action={"type": "type_text", "text": ""})
        with pytest.raises(HandoverError, match="not overridden"):
            env.supervision.decide(proposal.id, "done")
        with pytest.raises(HandoverError, match="proposal 999 is not waiting"):
            env.supervision.decide(999, "accept")
        env.supervision.decide(proposal.id, "edit", action={"type": "type_text", "text": " the"}, person="ana")
        waiting["thread"].join(10)
        assert "ana changed your action; this ran instead: type_text(' the')" in waiting["result"].text
        assert "changed your action" in waiting["result"].data["human"]  # what CodeAct's call returns has it too
        assert env.desktop.typed == "draft the"

        waiting = _proposed(env, lambda: env.step({"type": "type_text", "text": " wrong"}))
        proposal = env.supervision.current()
        env.supervision.decide(proposal.id, "override", person="ana")
        assert env.state.supervision["proposal"]["overriding"] is True
        with pytest.raises(HandoverError, match="say done"):
            env.supervision.decide(proposal.id, "accept")
        env.supervision.decide(proposal.id, "done", person="ana", actions=[{"type": "key", "keys": "ctrl+s"}])
        waiting["thread"].join(10)
        obs = waiting["result"]
        assert "ana did something else instead of your type_text(' wrong') (1 actions): key('ctrl+s')" in obs.text
        assert env.desktop.typed == "draft the"  # the agent's own action never ran
        assert env.state.supervision["last"]["decision"] == "override"


@pytest.mark.fake
def test_nobody_deciding_runs_the_action_and_set_up_and_looks_are_not_proposed():
    with _supervised(decide_within=0.3) as env:
        env.reset()
        start = time.monotonic()
        out = env.call_tool("type_text", {"text": "late"})
        assert time.monotonic() - start < 5 and "nobody decided on your action in 0.3s; it ran" in out.text
        assert env.desktop.typed == "late"
        env.perform({"type": "type_text", "text": " set-up"})  # the control plane's: runs at once
        env.call_tool("screenshot", {})  # a look is no input
        assert env.desktop.typed == "late set-up" and env.supervision.current() is None
        env.supervision.turn(False)
        assert "[human]" not in env.call_tool("type_text", {"text": "!"}).text


@pytest.mark.fake
def test_a_reset_cancels_a_proposal_waiting_for_a_decision():
    with _supervised() as env:
        env.reset()
        waiting = _proposed(env, lambda: env.call_tool("type_text", {"text": "x"}))
        resetting = threading.Thread(target=env.reset)
        resetting.start()
        waiting["thread"].join(10)
        resetting.join(30)  # before the environment closes (a reset still under way would fail on the close)
        assert isinstance(waiting["error"], HandoverError) and "was reset while your action waited" in str(
            waiting["error"])
        assert env.supervision.current() is None and env.desktop.typed == ""


@pytest.mark.fake
def test_edits_are_input_actions_by_coordinates_and_a_step_deadline_ends_the_wait():
    with _supervised() as env:
        env.reset()
        waiting = _proposed(env, lambda: env.call_tool("type_text", {"text": "x"}))
        proposal = env.supervision.current()
        for edit, message in (({"type": "screenshot"}, "an edit is an input action, not screenshot"),
                              ({"type": "click", "element": 3}, "not an element number"),
                              ({"type": ["click"]}, "unknown action type")):
            with pytest.raises((ConfigError, InvalidActionError), match=message):
                env.supervision.decide(proposal.id, "edit", action=edit)
        env.supervision.turn(False)  # the people stop deciding: it runs, and the episode says why
        waiting["thread"].join(10)
        assert "turned propose-and-accept off; your action ran" in waiting["result"].text
        assert env.state.supervision["last"]["decision"] == "turned_off" and env.desktop.typed == "x"
        env.supervision.turn(True)
        start = time.monotonic()
        obs = env.step({"type": "type_text", "text": "never"}, timeout_s=0.5)
        assert time.monotonic() - start < 5 and obs.error["code"] == "TIMEOUT", obs.error
        assert "did not run" in obs.error["message"] and env.desktop.typed == "x"


@pytest.mark.fake
def test_a_proposal_that_runs_while_a_person_holds_the_desktop_is_refused():
    from hci_envs.traits import DesktopEnv

    holder: list[str] = []
    hooks = EnvironmentHooks(input_blocked=lambda: holder[0] if holder else None)
    with DesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]},
                    hooks=hooks, supervise=True, decide_within=0.5) as env:
        env.reset()
        waiting = _proposed(env, lambda: env.call_tool("type_text", {"text": "x"}))
        holder.append("desktop under human control: a person is using it over VNC")  # they took it meanwhile
        waiting["thread"].join(10)
        assert isinstance(waiting["error"], HumanControlError) and env.desktop.typed == ""
