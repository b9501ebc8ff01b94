"""The recorder: a session's input, human (from the VNC tap) or agent (from the executor), into an episode.

Human input arrives as RFB messages from controlling viewers; each is stamped on arrival, written to
raw/input.jsonl at once, and fed to the reducer, which turns the stream into canonical actions. Agent actions
are canonical already. A frame thread captures the screen each time it has been stable for a moment after a
change, and gives every action the stable frame before it and the first stable frame after it.

A reset of the session ends the recording. Pausing excludes input until resumed.

When it stops, the episode's video is written (video.py): on by default when PyAV is installed, asked for with
``video=True`` (an error naming the ``video`` extra without it), left out with ``video=False``. ``video_fps``
adds the continuous capture (continuous.py). A video that cannot be made is logged and noted in meta.json's
``video_error``; the episode is complete without it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from hci_envs import __version__
from hci_envs.errors import ConfigError, HciEnvsError, VideoError
from hci_envs.vnc.rfb import ClientMessage

from .recovery import recover_episodes
from .reducer import _MODIFIERS, ReducedAction, Reducer, Thresholds, Unreduced, printable
from .store import SCHEMA_VERSION, JsonlWriter, StepWriter, frame_pair, new_episode_dir, write_json_atomic

log = logging.getLogger(__name__)

Source = Literal["human", "agent", "both"]
_MASK_KEYSYM = 0x2A  # "*"
#: How long an app has to draw an action's effect before the screen is taken as what the action left (unless the
#: next input comes sooner).
AFTER_WINDOW = 2.0


class Recorder:
    """Records one episode of a session. ``start()``, then ``pause()``/``resume()``, then ``stop()``."""

    def __init__(
        self,
        env: Any,
        vnc: Any,
        root: str | Path,
        *,
        source: Source = "human",
        mask_text: bool = False,
        name: str | None = None,
        thresholds: Thresholds | None = None,
        frame_quiet: float = 0.1,
        include_observations: bool = False,
        task: str | None = None,
        video: bool | None = None,
        video_fps: float = 0.0,
        video_codec: str | None = None,
        accessibility: bool = False,
        review: bool = False,
    ) -> None:
        if source in ("human", "both") and vnc is None:
            raise ConfigError("recording human input needs the session's VNC side", field="source")
        self._codec = _video_codec(video, video_fps, video_codec)  # before anything is on disk: it may refuse
        self.video = self._codec is not None
        self.video_fps = float(video_fps)
        self.env = env
        self.vnc = vnc
        self.source = source
        self.mask_text = mask_text
        self.thresholds = thresholds or Thresholds()
        self.frame_quiet = frame_quiet
        self.include_observations = include_observations
        self.task = task
        #: Whether each frame gets the accessibility tree read right after it (a11y/NNNNNN.json).
        self.accessibility = accessibility
        #: Whether the episode waits for its demonstrator's review (trim, verdict, submit: review.py) before a
        #: dataset may hold it.
        self.review = review
        self._trees_due: list[str] = []  # frames whose tree is still to be read (outside the lock: it can be slow)
        self._check: dict[str, Any] | None = None
        recover_episodes(Path(root))  # episodes a killed server left open are finished before a new one starts
        self.path = new_episode_dir(Path(root), name)
        self.state: Literal["new", "recording", "paused", "stopped"] = "new"
        self._screen = (env.declared_state.width, env.declared_state.height)
        self._unreduced: list[Unreduced] = []
        self._reducer = self._new_reducer()
        self._lock = threading.RLock()
        self._raw = JsonlWriter(self.path / "raw" / "input.jsonl", exclusive=True)
        self._actions = JsonlWriter(self.path / "actions.jsonl")
        self._steps = StepWriter(self._actions)
        self._origin = time.monotonic()
        self._wall_origin = datetime.now(timezone.utc)
        self._i = 0
        self._waiting: list[tuple[ReducedAction, str]] = []
        self._frames: list[tuple[str, float]] = []
        self._frame_generation: int | None = None
        self._held_mods: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stop_reason: str | None = None
        self._recent: deque[tuple[float, dict[str, Any], tuple[tuple[int, int], ...]]] = deque(maxlen=8)
        #: When the latest inputs that act came (keys, buttons, pastes; not bare pointer moves): the next input
        #: after an action bounds the screen that shows its effect.
        self._inputs: deque[float] = deque(maxlen=64)
        self._continuous: Any = None
        self._continuous_info: dict[str, Any] | None = None
        self._video_result: dict[str, Any] | None = None
        self._video_errors: list[str] = []
        self._finished = threading.Event()  # set when stop() has written everything, the video included
        self._stop_error: str | None = None  # why a stop that did not wait failed to write the episode out
        #: The agent's hand-overs to a person during the episode (meta.json's "handovers"; see segments.py).
        self._handovers: list[dict[str, Any]] = []
        #: The agent's actions a person decided on before they ran (meta.json's "proposals"; see segments.py).
        self._proposals: list[dict[str, Any]] = []

    # -- lifecycle -------------------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        env = self.env
        cls = type(env)
        return {
            "schema_version": SCHEMA_VERSION,
            "env": f"{cls.__module__}:{cls.__qualname__}",
            "task": self.task,
            "episode_id": env.state.episode_id,
            "screen": {"width": env.declared_state.width, "height": env.declared_state.height},
            "start_state": env.declared_state.model_dump(),
            "image_digest": os.environ.get("HCI_ENVS_IMAGE_DIGEST"),
            "clock_origin": {"monotonic": self._origin, "wall": self._wall_origin.isoformat()},
            "source": self.source,
            "mask_text": self.mask_text,
            "thresholds": self.thresholds.to_dict(),
            "recorder": {"name": "hci-envs", "version": __version__},
            "state": self.state,
            "ended": None if self.state != "stopped" else datetime.now(timezone.utc).isoformat(),
            "end_reason": self._stop_reason,
            "counts": {"raw": self._raw.count, "actions": self._actions.count, "frames": len(self._frames),
                       "unreduced": len(self._unreduced)},
            "accessibility": self.accessibility,
            # the task's checker, asked for while recording (the last answer): check.json has its details
            "check": {k: self._check[k] for k in ("task", "score", "success")} if self._check else None,
            # input no canonical action can represent: its messages are in raw/input.jsonl
            "unreduced": [u.to_dict() for u in self._unreduced],
            "handovers": self._handovers,
            "proposals": self._proposals,
            **({"review": {"state": "pending"}} if self.review else {}),
            # the settled screen when the recording stopped: the end state, and the last action's after-frame
            "final_frame": self._frames[-1][0] if self.state == "stopped" and self._frames else None,
            **({"video": {"continuous": self._continuous_info}} if self._continuous_info else {}),
        }

    def _new_reducer(self) -> Reducer:
        return Reducer(self.thresholds, screen=self._screen, unreduced=self._unreduced)

    def start(self) -> Recorder:
        with self._lock:
            if self.state != "new":
                return self
            self.state = "recording"
            write_json_atomic(self.path / "meta.json", self._meta())
            self._capture_frame()  # the screen the episode starts from
            if self.source in ("human", "both"):
                self.vnc.taps.append(self.on_human)
            if self.source in ("agent", "both"):
                self.env.executor.observers.append(self.on_agent)
            self.env.listeners.append(self._on_env_event)
            if getattr(self.env, "handover", None) is not None:
                self.env.handover.observers.append(self._on_handover)
            if getattr(self.env, "supervision", None) is not None:
                self.env.supervision.observers.append(self._on_proposal)
            if self.video_fps:
                self._start_continuous()
        self._write_trees()
        self._thread = threading.Thread(target=self._frames_loop, name="recorder-frames", daemon=True)
        self._thread.start()
        return self

    def _start_continuous(self) -> None:
        from .continuous import ContinuousCapture

        try:
            self._continuous = ContinuousCapture(
                self.env.desktop, self.path, self.video_fps, self._codec, clock=self.now,
                active=lambda: self.state == "recording", mark=self._recent_mark).start()
        except Exception as exc:  # noqa: BLE001 - the episode records without it
            log.warning("no continuous capture for %s: %s", self.path, exc)
            self._video_errors.append(f"the continuous capture did not start: {type(exc).__name__}: {exc}")

    def _recent_mark(self, now: float) -> Any:
        """The label of the latest action for a short while after it (the continuous capture draws it)."""
        from .continuous import LABEL_SECONDS
        from .overlay import Mark, action_label, action_point

        for t_end, action, moved in reversed(list(self._recent)):  # a copy: the input threads append to it
            if t_end <= now:
                if now - t_end > LABEL_SECONDS:
                    return None
                return Mark(action_label(action), action_point(action), action, moved, arrow=False)
        return None

    def pause(self) -> None:
        with self._lock:
            if self.state == "recording":
                self._emit(self._reducer.flush())
                self.state = "paused"
                write_json_atomic(self.path / "meta.json", self._meta())

    def resume(self) -> None:
        with self._lock:
            if self.state == "paused":
                self._reducer = self._new_reducer()  # input before the pause does not carry over
                self._held_mods.clear()
                self.state = "recording"
                write_json_atomic(self.path / "meta.json", self._meta())

    def stop(self, reason: str = "stopped", *, wait: bool = True) -> dict[str, Any]:
        """Stop recording: nothing more is captured from now on, the end of the episode (its last frame) is taken
        at once, and the episode is written out (the trees, meta.json, the video). With ``wait`` this returns
        once it is on disk; without, once the end is taken, with the state "stopping" while a thread writes it
        (``status()`` says "stopped" when it is done, and ``stop_error`` if that failed)."""
        with self._lock:
            already = self.state == "stopped"
            if not already:
                self._emit(self._reducer.flush())
                self.state = "stopped"
                self._stop_reason = reason
                self._detach()
        if already:  # another thread is stopping it (a reset and a stop command): answer once it is done
            if wait:
                self._finished.wait(timeout=300)
            return self.status()
        try:
            self._capture_end()  # before the answer: a client acting right after it must not be in the episode
        except BaseException:
            self._finished.set()
            raise
        if not wait:
            answer = self.status()  # "stopping": the thread has not finished (it has not even started)
            threading.Thread(target=self._write_out_in_background, name="recorder-stop").start()
            return answer
        try:
            self._write_out()
        finally:
            self._finished.set()
        return self.status()

    def _write_out_in_background(self) -> None:
        try:
            self._write_out()
        except Exception as exc:  # nobody waits for this thread: the status and the log say it
            self._stop_error = f"{type(exc).__name__}: {exc}"
            log.exception("the episode %s was not written out whole", self.path)
        finally:
            self._finished.set()

    def _capture_end(self) -> None:
        """What ends the episode on screen: the capture threads stopped, the last frame taken."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._continuous is not None:
            self._continuous_info = self._continuous.stop(self.now())
        with self._lock:
            try:
                self._settle_and_capture()
            except Exception:  # the desktop may be gone (a reset ended the recording)
                log.debug("no final frame", exc_info=True)

    def _write_out(self) -> None:
        """The episode on disk, whole: its trees, the waiting steps, meta.json, then the video."""
        self._write_trees()
        with self._lock:
            self._write_waiting(final=True)
            write_json_atomic(self.path / "meta.json", self._meta())
            self._raw.close()
            self._actions.close()
        if self.video:
            self._write_video()

    def _write_video(self) -> None:
        """The step video, once the episode is complete on disk. A failure costs the video, not the episode."""
        from .video import note_video_error, write_video

        try:
            self._video_result = {"video": str(write_video(self.path, codec=self._codec.name))}
        except Exception as exc:  # noqa: BLE001 - whatever the frames or the encoder failed with
            message = exc.message if isinstance(exc, HciEnvsError) else f"{type(exc).__name__}: {exc}"
            log.warning("no video for the episode %s: %s", self.path, message)
            self._video_errors.insert(0, message)
        if self._video_errors:
            self._video_result = {**(self._video_result or {}), "video_error": "; ".join(self._video_errors)}
            note_video_error(self.path, self._video_result["video_error"])

    def _detach(self) -> None:
        for collection, item in ((getattr(self.vnc, "taps", []), self.on_human),
                                 (getattr(getattr(self.env, "executor", None), "observers", []), self.on_agent),
                                 (self.env.listeners, self._on_env_event),
                                 (getattr(getattr(self.env, "handover", None), "observers", []), self._on_handover),
                                 (getattr(getattr(self.env, "supervision", None), "observers", []),
                                  self._on_proposal)):
            try:
                collection.remove(item)
            except ValueError:
                pass

    def _on_handover(self, event: str, record: Any) -> None:
        """The agent asked for a person, one took the desktop, handed it back (or nobody came): kept in the raw
        stream and in meta.json, in the episode's time, so that each step can be told apart as the agent's, its
        attempt before asking, or the person's correction (segments.py)."""
        def episode_time(t: float | None) -> float:  # the hand-over's times are the monotonic clock's too
            return round((t if t is not None else time.monotonic()) - self._origin, 6)

        with self._lock:
            if self.state == "stopped":
                return
            # (not the agent's last actions the person was shown: they are the episode's own steps, masked there)
            if event == "requested" or not self._handovers:
                self._handovers.append({"reason": record.reason, "requested_at": episode_time(record.requested_at)})
            current = self._handovers[-1]
            if event == "accepted":
                # when the person's first input arrived, if that is how they took it (before this is called)
                current.update(person=record.person, accepted_at=episode_time(record.accepted_at))
            elif event != "requested":
                current.update(ended_at=episode_time(record.ended_at), outcome=record.outcome, note=record.note)
            self._note_control("handover", episode_time(None), {
                "event": event, **{k: current[k] for k in ("reason", "person", "note") if k in current}})

    def _on_proposal(self, event: str, proposal: Any) -> None:
        """A person decided on an agent's action before it ran (propose and accept): the decision is kept beside
        the proposal, in the episode's time (an edit's action is then recorded as the agent's step that ran; an
        override's as the person's steps)."""
        if event in ("proposed", "overriding"):
            return
        with self._lock:
            if self.state == "stopped":
                return
            record = {"id": proposal.id, "action": self._masked(proposal.action), "decision": event,
                      "proposed_at": round(proposal.proposed_at - self._origin, 6),
                      "decided_at": round((proposal.decided_at or time.monotonic()) - self._origin, 6)}
            if proposal.edited is not None:
                record["edited"] = self._masked(proposal.edited)
            if proposal.person is not None:
                record["person"] = proposal.person
            self._proposals.append(record)
            self._note_control("proposal", record["decided_at"],
                               {k: v for k, v in record.items() if k not in ("proposed_at", "decided_at")})

    def _note_control(self, msg: str, t: float, fields: dict[str, Any]) -> None:
        """A person's decision, in the raw stream and meta.json (under the lock). The actions so far end here: the
        input that follows starts a step of its own, not one with the input before it."""
        self._emit(self._reducer.flush())
        self._raw.write({"i": self._i, "t": t, "source": "control", "msg": msg, **fields})
        self._i += 1
        write_json_atomic(self.path / "meta.json", self._meta())

    def _masked(self, action: dict[str, Any]) -> dict[str, Any]:
        """An action as the episode keeps it: with ``mask_text``, what it types as asterisks, as for steps."""
        if self.mask_text and action.get("type") in ("type_text", "clipboard_set"):
            return {**action, "text": "*" * len(action.get("text", ""))}
        return action

    def _on_env_event(self, event: str) -> None:
        if event == "reset":
            threading.Thread(target=self.stop, args=("the session was reset",), daemon=True).start()

    def status(self) -> dict[str, Any]:
        # "stopping" while stop() still writes the episode out (its last frame, meta.json, the video): what a
        # reader finds on disk is final only once this says "stopped"
        state = "stopping" if self.state == "stopped" and not self._finished.is_set() else self.state
        return {"state": state, "path": str(self.path), "source": self.source, "mask_text": self.mask_text,
                "raw_events": self._raw.count, "actions": self._actions.count, "frames": len(self._frames),
                "unreduced": len(self._unreduced), "end_reason": self._stop_reason, "video": None,
                **(self._video_result or {}), **({"stop_error": self._stop_error} if self._stop_error else {})}

    def now(self) -> float:
        return time.monotonic() - self._origin

    # -- input -----------------------------------------------------------------------------------------
    def on_human(self, viewer: Any, message: Any, arrived: float) -> None:
        """The VNC tap: called on the proxy's event loop for each human input message, so it stays short."""
        if self.state != "recording":
            return
        record: dict[str, Any] = {"t": round(arrived - self._origin, 6), "source": "human", "viewer": viewer.id,
                                  **message.to_dict()}
        if self.mask_text:
            self._mask(record)
        with self._lock:
            if self.state != "recording":
                return
            record["i"] = self._i
            self._i += 1
            self._raw.write(record)
            if record["msg"] != "PointerEvent" or record.get("mask"):
                self._inputs.append(record["t"])
            self._emit(self._reducer.feed(ClientMessage.from_dict(record)))

    def _mask(self, record: dict[str, Any]) -> None:
        if record["msg"] == "KeyEvent":
            name = _MODIFIERS.get(record["keysym"])
            if name is not None:
                (self._held_mods.add if record["down"] else self._held_mods.discard)(name)
            elif printable(record["keysym"]) and not self._held_mods & {"ctrl", "alt", "super"}:
                record["keysym"] = _MASK_KEYSYM
        elif record["msg"] == "ClientCutText":
            record["text"] = "*" * len(record["text"])

    def on_agent(self, action: Any, result: Any) -> None:
        """The executor's observer: an agent action, already canonical."""
        if self.state != "recording" or (action.read_only and not self.include_observations):
            return
        t_end = self.now()
        t_start = max(0.0, t_end - result.elapsed_ms / 1000)
        data = action.model_dump(mode="json", exclude_defaults=True)
        data["type"] = action.type
        if action.type == "wait":  # what it waited: a wait ends early when a person hands the desktop back
            data["ms"] = min(data.get("ms", 0), round(result.elapsed_ms))
        if "element" in data and (result.data or {}).get("x") is not None:
            # An element number means nothing outside its episode: keep where the action happened, as for people.
            del data["element"]
            data.pop("scale", None)
            data["x"], data["y"] = result.data["x"], result.data["y"]
        data = self._masked(data)
        with self._lock:
            index = self._i
            self._i += 1
            self._raw.write({"i": index, "t": round(t_start, 6), "source": "agent", "msg": "action", "action": data})
            self._inputs.append(t_start)
            self._recent.append((t_end, data, ()))
            result_text = "*" * len(result.text) if self.mask_text and action.type == "clipboard_get" else result.text
            self._waiting.append((ReducedAction(data, t_start, t_end, (index, index), result=result_text), "agent"))

    def _emit(self, actions: list[ReducedAction]) -> None:
        if self.mask_text:
            for a in actions:
                if a.action["type"] == "type_text":
                    a.action["text"] = "*" * len(a.action["text"])
        self._waiting.extend((a, "human") for a in actions)
        self._recent.extend((a.t_end, a.action, tuple(map(tuple, a.pre_move or ()))) for a in actions)

    # -- frames ----------------------------------------------------------------------------------------
    def _frames_loop(self) -> None:
        while self.state in ("recording", "paused"):
            time.sleep(0.05)
            try:
                with self._lock:
                    if self.state == "recording":
                        self._emit(self._reducer.tick(self.now()))
                self._maybe_capture()
                self._write_trees()
                with self._lock:
                    self._write_waiting(final=False)
            except Exception:
                if self.state in ("recording", "paused"):
                    log.exception("recorder frame loop")
                    time.sleep(0.5)

    def _maybe_capture(self) -> None:
        events = self.env.desktop.events
        generation = events.damage_generation()
        if generation == self._frame_generation:
            return
        quiet = events.seconds_since_damage()
        latest = self._frames[-1][1] if self._frames else 0.0
        # capture once stable; a screen that never stops changing is captured every two seconds anyway
        if quiet >= self.frame_quiet or self.now() - latest > 2.0:
            with self._lock:
                self._capture_frame(generation)

    def _capture_frame(self, generation: int | None = None) -> None:
        desktop = self.env.desktop
        if generation is None:
            generation = desktop.events.damage_generation()
        image = desktop.screen.capture(fmt="png")
        name = f"{len(self._frames):06d}.png"
        tmp = self.path / "frames" / (name + ".tmp")
        tmp.write_bytes(image.data)
        os.replace(tmp, self.path / "frames" / name)
        self._frames.append((name, self.now()))
        self._frame_generation = generation
        if self.accessibility:
            self._trees_due.append(name)

    def _write_trees(self) -> None:
        """The accessibility tree of each frame captured since the last call, read now (right after it)."""
        from hci_envs.desktop.a11y_model import Query

        with self._lock:  # the frame thread and stop() both come here
            due, self._trees_due = self._trees_due, []
        for name in due:
            try:
                # not remembered: the agent's element numbers stay those of its own latest observation
                tree = self.env.executor.read_tree(Query(), remember=False).to_dict()
            except Exception as exc:  # noqa: BLE001 - the frame stays; its tree says why it is missing
                tree = {"nodes": [], "reason": f"the tree could not be read: {type(exc).__name__}: {exc}"}
            (self.path / "a11y").mkdir(exist_ok=True)
            write_json_atomic(self.path / "a11y" / name.replace(".png", ".json"), tree)

    def note_check(self, check: dict[str, Any]) -> None:
        """The task's checker answered while this episode was recorded: kept beside it (check.json, and its
        score in meta.json), the last answer winning."""
        with self._lock:
            if self.state == "stopped" and self._finished.is_set():
                return
            self._check = dict(check)
            write_json_atomic(self.path / "check.json", self._check)
            write_json_atomic(self.path / "meta.json", self._meta())

    def _settle_and_capture(self) -> None:
        desktop = self.env.desktop
        if desktop is None:
            return
        desktop.events.wait_settled(self.frame_quiet, 2.0)
        if desktop.events.damage_generation() != self._frame_generation:
            self._capture_frame()

    def _write_waiting(self, final: bool) -> None:
        """Write the actions whose effect on the screen is known, in order. An action's after-frame is the
        screen just before the next input, or AFTER_WINDOW seconds after it ended if no input came sooner: an
        app may draw its answer in stages, or late on a busy machine (a save whose title changes a moment after
        a caret blink was captured), and the first quiet screen after the action can be from before its effect."""
        now = self.now()
        while self._waiting:
            action, source = self._waiting[0]
            until = action.t_end + AFTER_WINDOW
            later = [t for t in self._inputs if t > action.t_end]
            if len(self._waiting) > 1:
                later.append(self._waiting[1][0].t_start)
            if later:
                until = min(until, min(later))
            if not final and now < until:
                break  # the screen may show more of its effect yet
            before, after = frame_pair(self._frames, action.t_start, action.t_end, until)
            if after is None:
                if not final and now - action.t_end < AFTER_WINDOW:
                    break  # wait for the screen to settle after it
                after = self._frames[-1][0] if self._frames else None
            self._waiting.pop(0)
            self._steps.write(action, source, before, after)


def _video_codec(video: bool | None, video_fps: float, codec: str | None) -> Any:
    """The codec episode videos are written with, or None for no video. ``video=None`` is on when PyAV is
    installed; asking for it (``video=True``, a ``video_fps``) without PyAV is an error naming the extra."""
    from .video import pick_codec, video_available

    if not 0 <= video_fps <= 30:
        raise ConfigError(f"video_fps must be between 0 and 30, got {video_fps}", field="video_fps")
    if video is False:
        if video_fps:
            raise ConfigError("video_fps is the rate of the episode's continuous video: it needs video on",
                              field="video_fps")
        return None
    if video is None and not video_fps:
        if not video_available():
            return None
        try:
            return pick_codec(codec)
        except VideoError as exc:  # a PyAV built without either encoder: on by default means "if it can"
            log.warning("episodes are recorded without video: %s", exc.message)
            return None
    return pick_codec(codec)
