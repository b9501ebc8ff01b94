"""Collect a human demonstration over VNC, then replay it into a fresh desktop.

    .venv/bin/python examples/record_and_replay.py            # you operate the desktop in a browser or viewer
    .venv/bin/python examples/record_and_replay.py --scripted # a scripted VNC client plays the human

A local server starts with xterm and a native VNC port. Recording starts through the control plane (never by
keys in the VNC stream); whatever the person does in the browser page or a VNC viewer becomes canonical
actions in episodes/<name>/actions.jsonl, with the screens around each one. Stopping the recording, the
episode is replayed through the agents' executor into a fresh desktop and each step's screen is compared.
"""

from __future__ import annotations

import argparse
import sys
import time

import httpx

from hci_envs import HciEnvClient
from hci_envs.recorders import load_episode, replay_episode

DEMO_TEXT = "echo hello from a human"


def play_the_human(port: int, password: str, width: int, height: int) -> None:
    """A real VNC client (vncdotool) doing what a person would: click into the terminal, type, press Enter."""
    from vncdotool import api

    client = api.connect(f"127.0.0.1::{port}", password=password)
    try:
        client.mouseMove(width // 3, height // 3)
        client.mousePress(1)
        time.sleep(0.3)
        for char in DEMO_TEXT:
            client.keyPress(char)
        client.keyPress("enter")
        time.sleep(0.5)
    finally:
        client.disconnect()
        api.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripted", action="store_true", help="a scripted VNC client plays the human")
    parser.add_argument("--episodes", default="episodes", help="where episodes are stored")
    parser.add_argument("--name", default=f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args(argv)

    with HciEnvClient.from_local(apps=["xterm"], size=(1024, 768), vnc_port=0, episodes_dir=args.episodes) as env:
        env.reset()
        state = env.state().model_dump()
        # This client's desktop is its own session; its recording controls live under its session path.
        headers = {"Authorization": f"Bearer {env.control_token}"} if env.control_token else {}
        control = httpx.Client(base_url=f"{env.base_url}/sessions/{state['session_id']}", headers=headers, timeout=30)
        started = control.post("/recording", json={"command": "start", "name": args.name}).raise_for_status().json()
        print(f"recording into {started['path']}")
        if args.scripted:
            play_the_human(state["vnc_native_port"], state["vnc_secrets"]["control"], 1024, 768)
        else:
            print(f"\nOpen the desktop in a browser:  {state['vnc_url']}")
            print(f"or in a VNC viewer:             {state['vnc_native']}")
            input("Do something on the desktop, then press Enter here to stop recording. ")
        stopped = control.post("/recording", json={"command": "stop"}).raise_for_status().json()

    episode = load_episode(stopped["path"])
    print(f"\n{len(episode.actions)} actions recorded:")
    for record in episode.actions:
        print("  ", record["action"])
    print("\nreplaying into a fresh desktop ...")
    report = replay_episode(episode)
    summary = report.summary()
    print(f"replayed {summary['steps']} steps: {summary['errors']} errors, mean screen match "
          f"{summary['mean_match']}, final screen match {report.final_match}")
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
