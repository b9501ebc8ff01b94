"""Trace bundles (recorders/bundle.py): an episode with an agent's part and a person's, its accessibility trees and
its checker's answer, as one zip that Python alone reads, without hci-envs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import need_programs
from helpers import McpClient, ServerProcess, hci_envs_command
from rfb_client import RfbClient

#: Run with ``python3 -I -S``: no site-packages, so no hci-envs; what a reader of the bundle has.
READER = r'''
import hashlib, json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as bundle:
    names = set(bundle.namelist())
    manifest = json.loads(bundle.read("manifest.json"))
    for name, info in manifest["files"].items():
        data = bundle.read(name)
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], name
    steps = [json.loads(line) for line in bundle.read("actions.jsonl").splitlines()]
    trees = {n: json.loads(bundle.read(n)) for n in names if n.startswith("a11y/")}
    print(json.dumps({"manifest": manifest, "readme": bundle.read("README.md").decode()[:200],
                      "sources": [s["source"] for s in steps], "types": [s["action"]["type"] for s in steps],
                      "frames": sorted(n for n in names if n.startswith("frames/")),
                      "tree_roles": sorted({node["role"] for t in trees.values() for node in t["nodes"]}),
                      "trees": sorted(trees), "check": json.loads(bundle.read("check.json"))}))
'''


@pytest.mark.x11
def test_an_episode_of_an_agent_and_a_person_becomes_a_bundle_read_without_hci_envs(x11, tmp_path):
    need_programs("x11vnc", "mousepad")
    episodes = tmp_path / "episodes"
    with ServerProcess("--env", "workstation", "--vnc-port", "0", "--no-spare", "--episodes-dir", str(episodes)) \
            as server, server.http() as http:
        assert http.post("/reset", json={"task": "edit-append"}).status_code == 200
        state = http.get("/state").json()
        started = http.post("/recording", json={"command": "start", "source": "both", "accessibility": True,
                                                "task": "edit-append"})
        assert started.status_code == 200, started.text
        with McpClient(f"{server.base_url}/mcp") as mcp:  # the agent writes the line ...
            mcp.ok("key", {"keys": "ctrl+End"})
            mcp.ok("type_text", {"text": "done\n"})
        time.sleep(0.5)
        person = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
        try:  # ... and a person saves it
            person.key(0xFFE3, True)
            person.tap(ord("s"))
            person.key(0xFFE3, False)
            time.sleep(1.0)
        finally:
            person.close()
        scored = http.post("/score", json={}).json()
        assert scored["score"] == 1.0, scored
        stopped = http.post("/recording", json={"command": "stop"}).json()
    out = tmp_path / "trace.zip"
    made = subprocess.run([*hci_envs_command(), "bundle", stopped["path"], "--out", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0 and str(out) in made.stdout, made.stdout + made.stderr

    read = subprocess.run([sys.executable, "-I", "-S", "-c", READER, str(out)], capture_output=True, text=True,
                          timeout=60)
    assert read.returncode == 0, read.stderr
    seen = json.loads(read.stdout)
    manifest = seen["manifest"]
    assert manifest["format"] == "hci-envs trace bundle" and manifest["task"] == "edit-append"
    assert manifest["check"] == {"task": "edit-append", "score": 1.0, "success": True}, manifest["check"]
    assert seen["check"]["score"] == 1.0
    assert {"agent", "human"} <= set(seen["sources"]), seen["sources"]
    assert manifest["steps_by_actor"]["agent"] == seen["sources"].count("agent") >= 2
    # the agent's keys, then the person's chord
    assert seen["types"][seen["sources"].index("human")] == "key", seen["types"]
    # a tree for every frame, with mousepad's widgets in it
    assert [t.replace("a11y/", "frames/").replace(".json", ".png") for t in seen["trees"]] == seen["frames"]
    assert "text" in seen["tree_roles"] or "document text" in seen["tree_roles"], seen["tree_roles"]
    assert seen["readme"].startswith("# A recorded episode")


@pytest.mark.fake
def test_a_bundle_refuses_what_is_not_a_finished_episode(tmp_path):
    """Not an episode, a damaged one, or an archive that is not a zip: a clear error each, and no archive."""
    def bundle(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*hci_envs_command(), "bundle", *args], capture_output=True, text=True, timeout=60)

    (tmp_path / "empty").mkdir()
    made = bundle(str(tmp_path / "empty"), "--out", str(tmp_path / "x.zip"))
    assert made.returncode != 0 and "no episodes found" in made.stderr and "Traceback" not in made.stderr, made
    damaged = tmp_path / "damaged"
    (damaged / "frames").mkdir(parents=True)
    (damaged / "meta.json").write_text('{"schema_version": 1}')
    (damaged / "actions.jsonl").write_text("not json\n{}\n")
    made = bundle(str(damaged), "--out", str(tmp_path / "x.zip"))
    assert made.returncode != 0 and "damaged" in made.stderr and "Traceback" not in made.stderr, made
    assert not list(tmp_path.glob("*.zip")) and not list(tmp_path.glob(".*.partial"))
