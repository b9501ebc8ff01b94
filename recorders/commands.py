"""``hci-envs record | replay | export | import | video | bundle``: registered through the ``hci_envs.ops.cli``
entry point."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from hci_envs.errors import ConfigError, HciEnvsError, TransportError, error_from_dict


def register(sub: Any, command: Any) -> None:
    p = sub.add_parser("record", help="control the recording of a session (human demonstrations, agent runs)")
    p.add_argument("action", choices=("start", "stop", "pause", "resume", "status"))
    p.add_argument("--url", default=os.environ.get("HCI_ENVS_URL", "http://127.0.0.1:8000"),
                   help="the server (default http://127.0.0.1:8000 or HCI_ENVS_URL)")
    p.add_argument("--session", help="a session id (default: the server's default session)")
    p.add_argument("--control-token", default=os.environ.get("HCI_ENVS_CONTROL_TOKEN"))
    p.add_argument("--source", choices=("human", "agent", "both"), default="human")
    p.add_argument("--mask-text", action="store_true", help="store typed text as asterisks")
    p.add_argument("--name", help="the episode folder's name (default: the time)")
    p.add_argument("--task", help="a task id to note in meta.json")
    p.add_argument("--video", action=argparse.BooleanOptionalAction, default=None,
                   help="write the episode's video when it stops (default: if the server has PyAV; --video makes "
                        "it required, --no-video leaves it out)")
    p.add_argument("--video-fps", type=float, default=0.0,
                   help="also capture the screen continuously at this rate while recording (e.g. 2)")
    p.add_argument("--video-codec", choices=("h264", "vp9"), help="default: H.264 if PyAV can encode it")
    p.add_argument("--accessibility", action="store_true",
                   help="read the accessibility tree right after each frame (a11y/NNNNNN.json)")
    command("record")(_record)

    p = sub.add_parser("replay", help="replay episodes into a fresh desktop and report how they matched")
    p.add_argument("episode", help="an episode folder, or a folder of episodes")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--no-timing", action="store_true", help="run the actions back to back")
    p.add_argument("--no-compare", action="store_true", help="do not compare screens")
    p.add_argument("--json", dest="json_out", help="write the full report here")
    command("replay")(_replay)

    p = sub.add_parser("video", help="(re)encode episodes' videos: the screens of each step, the pointer and the "
                                     "action drawn on them")
    p.add_argument("episodes", nargs="+", help="episode folders, or folders of episodes")
    p.add_argument("--codec", choices=("h264", "vp9"), help="default: H.264 if PyAV can encode it, else VP9")
    p.add_argument("--min-frame", type=float, default=None, metavar="SECONDS",
                   help="the least time a step's screen is shown (default 0.4)")
    p.add_argument("--max-frame", type=float, default=None, metavar="SECONDS",
                   help="the most time a step's screen is shown, however long the episode idled (default 2)")
    command("video")(_video)

    p = sub.add_parser("export", help="episodes to a Hugging Face datasets parquet file")
    p.add_argument("episodes", nargs="+", help="episode folders, or folders of episodes")
    p.add_argument("--out", required=True, help="the .parquet file to write")
    p.add_argument("--format", choices=("steps", "sft", "pairs"), default="steps",
                   help="steps: one row per step, every recorded detail (import reads it back); sft: one chat per "
                        "episode with tool calls and screens, for TRL's SFTTrainer; pairs: the hand-overs' "
                        "preference pairs (the agent's last action before it asked, the person's first)")
    p.add_argument("--segments", help="steps and sft: only these segments, separated by commas: agent, attempt (the "
                                      "agent's steps before it asked for a person), correction (the person's steps "
                                      "in a hand-over), human")
    p.add_argument("--images", choices=("all", "none"), default="all",
                   help="sft: the screens as images (all), or text only (none)")
    p.add_argument("--instruction", help="sft: the user's instruction for every episode (default: its task's)")
    p.add_argument("--tasks", help="sft: a task file or folder to find episodes' instructions in (default: built-in)")
    p.add_argument("--tools", help="sft: the tools offered, as action names separated by commas (default: those of "
                                   "hci_envs.trl.TrlDesktopEnv)")
    command("export")(_export)

    p = sub.add_parser("bundle", help="episodes as trace bundles: one zip each, with the screens, video, actions "
                                      "and who made them, accessibility trees, the checker's answer and a manifest, "
                                      "readable without hci-envs")
    p.add_argument("episodes", nargs="+", help="episode folders, or folders of episodes")
    p.add_argument("--out", required=True, help="the .zip file (one episode), or a folder for one zip per episode")
    command("bundle")(_bundle)

    p = sub.add_parser("import", help="an exported parquet file back into episode folders")
    p.add_argument("parquet")
    p.add_argument("--out", required=True, help="the folder to put the episodes in")
    command("import")(_import)


def _record(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/") + (f"/sessions/{args.session}" if args.session else "")
    headers = {"Authorization": f"Bearer {args.control_token}"} if args.control_token else {}
    body: dict[str, Any] = {"command": args.action}
    if args.action == "start":
        body.update(source=args.source, mask_text=args.mask_text, name=args.name, task=args.task)
        if args.video is not None:
            body["video"] = args.video
        if args.video_fps:
            body["video_fps"] = args.video_fps
        if args.video_codec:
            body["video_codec"] = args.video_codec
        if args.accessibility:
            body["accessibility"] = True
    elif args.action == "stop":  # writing a long episode's video may outlast any one request: ask, then poll
        body["wait"] = False
    try:
        with httpx.Client(timeout=60, headers=headers, trust_env=False) as http:
            if args.action == "status":
                data = _answer(http.get(f"{base}/recording"))
            else:
                data = _answer(http.post(f"{base}/recording", json=body))
            if args.action == "stop" and data.get("state") == "stopping":
                data = _wait_stopped(http, f"{base}/recording", data)
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot reach {args.url}: {exc}") from None
    print(json.dumps(data, indent=2))
    return 0


def _answer(response: httpx.Response) -> Any:
    data = response.json()
    if response.status_code >= 400:
        error = data.get("error") if isinstance(data, dict) else None
        raise error_from_dict(error or {"message": str(data)})
    return data


def _wait_stopped(http: httpx.Client, url: str, data: dict[str, Any], every: float = 0.5) -> dict[str, Any]:
    """Poll the recording until the episode is written out, saying on stderr what it waits for."""
    print(f"[hci-envs] writing the episode {data.get('path')} ({data.get('frames')} frames) and its video...",
          file=sys.stderr, flush=True)
    start = said = time.monotonic()
    episode = data.get("path")
    while data.get("state") == "stopping":
        time.sleep(every)
        data = _answer(http.get(url))
        if data.get("path") != episode:  # a new recording began meantime: this one was done before it
            return {"state": "stopped", "path": episode, "note": "a new recording began before this one was "
                    f"seen stopped; its status is in {episode}/meta.json"}
        if time.monotonic() - said >= 10:
            said = time.monotonic()
            print(f"[hci-envs] still writing ({said - start:.0f}s)", file=sys.stderr, flush=True)
    return data


class _Failures:
    """The episodes a command could not handle: each said on stderr as it happens, without a traceback; the
    exit status is 1 if there were any."""

    def __init__(self) -> None:
        self.episodes: list[str] = []

    def __call__(self, episode: str, exc: Exception) -> None:
        message = exc.message if isinstance(exc, HciEnvsError) else f"{type(exc).__name__}: {exc}"
        print(f"hci-envs: skipped {episode}: {message}", file=sys.stderr)
        self.episodes.append(episode)

    def status(self) -> int:
        if not self.episodes:
            return 0
        print(f"hci-envs: {len(self.episodes)} episode(s) failed: {', '.join(self.episodes)}", file=sys.stderr)
        return 1


def _note(message: str) -> None:
    print(f"hci-envs: note: {message}", file=sys.stderr)


def _replay(args: argparse.Namespace) -> int:
    from .export import find_episodes
    from .replay import replay_episode

    failures = _Failures()
    reports = []
    for path in find_episodes([args.episode]):
        print(path)
        try:
            report = replay_episode(path, speed=args.speed, timing=not args.no_timing, compare=not args.no_compare)
        except HciEnvsError as exc:  # this episode cannot be replayed; the others still may
            failures(str(path), exc)
            continue
        for step in report.steps:
            match = "" if step.match is None else f"match {step.match:7.2%}"
            error = f"  ERROR {step.error}" if step.error else ""
            print(f"  step {step.index:4d} {step.type:<14} late {step.lateness_ms:8.1f} ms  {match}{error}")
        print(json.dumps(report.summary(), indent=2))
        if report.video:
            print(f"  video: {report.video}")
        if any(s.error for s in report.steps):
            failures.episodes.append(str(path))
        reports.append(report.to_dict())
    if args.json_out:
        with open(args.json_out, "w") as f:
            one = len(reports) == 1 and not failures.episodes
            json.dump(reports[0] if one else {"episodes": reports, "failed": failures.episodes}, f, indent=2)
    return failures.status()


def _video(args: argparse.Namespace) -> int:
    from .export import find_episodes
    from .video import MAX_FRAME_S, MIN_FRAME_S, pick_codec, write_video

    pick_codec(args.codec)  # no PyAV, or no encoder: said once, before any episode
    failures = _Failures()
    for path in find_episodes(args.episodes):
        try:
            video = write_video(path, codec=args.codec, min_frame_s=args.min_frame or MIN_FRAME_S,
                                max_frame_s=args.max_frame or MAX_FRAME_S)
        except Exception as exc:  # noqa: BLE001 - this episode has no video; the others still may
            failures(str(path), exc)
            continue
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))["video"]
        print(f"{video}  {meta['codec']} {meta['width']}x{meta['height']}, {meta['frames']} frames, "
              f"{meta['duration']:.1f} s, {video.stat().st_size / 1e6:.2f} MB")
    return failures.status()


def _export(args: argparse.Namespace) -> int:
    from .export import export_episodes, find_episodes

    failures = _Failures()
    segments = tuple(s.strip() for s in args.segments.split(",") if s.strip()) if args.segments else None
    if args.format == "sft":
        from .sft import sft_dataset

        tools = tuple(t.strip() for t in args.tools.split(",") if t.strip()) if args.tools else None
        dataset = sft_dataset(find_episodes(args.episodes), images=args.images, instruction=args.instruction,
                              tasks=args.tasks, tools=tools, on_error=failures, segments=segments, on_note=_note)
        dataset.to_parquet(args.out)
        print(f"wrote {len(dataset)} conversations to {args.out}")
        return failures.status()
    if args.format == "pairs":
        from .export import export_pairs

        dataset = export_pairs(args.episodes, args.out, on_error=failures, on_note=_note)
        print(f"wrote {len(dataset)} preference pairs to {args.out}")
        return failures.status()
    dataset = export_episodes(args.episodes, args.out, on_error=failures, segments=segments, on_note=_note)
    print(f"wrote {len(dataset)} steps to {args.out}")
    return failures.status()


def _bundle(args: argparse.Namespace) -> int:
    from .bundle import bundle_episode
    from .export import find_episodes

    episodes = find_episodes(args.episodes)
    out = Path(args.out)
    if len(episodes) > 1 or out.suffix != ".zip":
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out}: a folder for the bundles (or a .zip file for one episode), not a file",
                              field="out")
        out.mkdir(parents=True, exist_ok=True)
    failures = _Failures()
    written: set[Path] = set()
    for path in episodes:
        target = out / f"{path.name}.zip" if out.is_dir() else out
        if target in written:  # two episodes of the same name, from two folders
            failures(str(path), ConfigError(f"{target} holds another episode of this name already: bundle it "
                                            "into another folder"))
            continue
        written.add(target)
        try:
            bundle = bundle_episode(path, target)
        except Exception as exc:  # noqa: BLE001 - this episode has no bundle; the others still may
            failures(str(path), exc)
            continue
        print(f"{bundle}  {bundle.stat().st_size / 1e6:.2f} MB")
    return failures.status()


def _import(args: argparse.Namespace) -> int:
    from .export import import_episodes

    failures = _Failures()
    folders = import_episodes(args.parquet, args.out, on_error=failures, on_note=_note)
    for folder in folders:
        print(folder)
    return failures.status()


__all__ = ["register"]
