"""Forks and checkpoints where they cannot be had (hci_envs.env.forking, hci_envs.fork.criu_image), without X
or CRIU: a desktop that cannot be forked says why with a typed error, on every face, and leaves nothing behind;
a copy's uid maps are rewritten field by field; a restore gets new pipes for the agent's lasting processes, each
the right way round. The forks themselves are tests/test_fork.py's (tier fork)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hci_envs.errors import ConfigError, ForkError, NotResetError
from hci_envs.fork import criu_image

pytestmark = pytest.mark.fake


@pytest.fixture
def env():
    from hci_envs.traits import WorkstationEnv

    made = WorkstationEnv(desktop="fake")
    try:
        yield made
    finally:
        made.close()


def test_an_environment_that_cannot_fork_says_why_and_makes_nothing(env):
    with pytest.raises(NotResetError):
        env.fork(1)  # nothing runs yet
    env.reset()
    for n in (0, 17, True, "2", 1.5, None):
        with pytest.raises(ConfigError):
            env.fork(n)
    with pytest.raises(ForkError) as refused:
        env.fork(2)
    assert refused.value.details["reason"] == "unavailable" and "forkable" in refused.value.message
    with pytest.raises(ForkError):
        env.checkpoint("here")
    with pytest.raises(ConfigError):
        env.reset(checkpoint="never taken")
    assert env.call_tool("bash", {"command": "echo still here"}).data["stdout"] == "still here\n"


def test_a_server_refuses_a_fork_of_a_desktop_that_cannot_fork(fake_app):
    with fake_app.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        before = http.get("/sessions").json()
        refused = http.post("/sessions/default/fork", json={"n": 2})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "FORK_FAILED", refused.text
        assert refused.json()["error"]["reason"] == "unavailable"
        for body, status in (({"n": 0}, 400), ({"n": "x"}, 400), ({}, 422), ({"n": 2, "more": 1}, 409)):
            assert http.post("/sessions/default/fork", json=body).status_code == status, body
        assert http.post("/sessions/nope/fork", json={"n": 1}).status_code == 404
        assert http.post("/sessions/default/checkpoint", json={"name": "x"}).status_code == 409
        assert http.get("/sessions").json() == before  # no session was left made for a copy
    with fake_app.ws() as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        ws.recv()
        for data in ({"n": 1}, {"n": 0}, {"copies": 1}, "two"):
            ws.send(json.dumps({"type": "fork", "data": data}))
            reply = json.loads(ws.recv())
            assert reply["type"] == "error", reply
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv())["type"] == "state"  # the socket goes on


def _image(message: bytes) -> bytes:
    return b"\x01\x02\x03\x04\x05\x06\x07\x08" + struct.pack("<I", len(message)) + message


def _extent(first: int, lower: int, count: int) -> bytes:
    return criu_image.encode([(1, 0, first), (2, 0, lower), (3, 0, count)])


def test_a_copys_uid_maps_are_rewritten_and_nothing_else(tmp_path: Path):
    userns = criu_image.encode([(1, 2, _extent(0, 3_900_000, 1)), (1, 2, _extent(1000, 933, 1)),
                                (2, 2, _extent(0, 3_900_000, 1)), (2, 2, _extent(1000, 932, 1))])
    netns = criu_image.encode([(10, 2, b"1\x000"), (11, 0, 7)])
    (tmp_path / "userns-11.img").write_bytes(_image(userns))
    (tmp_path / "netns-12.img").write_bytes(_image(netns))
    linked = tmp_path / "elsewhere.img"
    linked.hardlink_to(tmp_path / "userns-11.img")
    criu_image.give_copy_its_uids(tmp_path, {0: 3_900_002, 1000: 940}, {0: 3_900_002, 1000: 939})
    fields = criu_image.fields(criu_image.message_of((tmp_path / "userns-11.img").read_bytes()))
    extents = [(number, criu_image.by_number(value)) for number, _kind, value in fields]  # type: ignore[arg-type]
    assert [(n, e[1], e[2], e[3]) for n, e in extents] == [
        (1, 0, 3_900_002, 1), (1, 1000, 940, 1), (2, 0, 3_900_002, 1), (2, 1000, 939, 1)]
    assert criu_image.fields(criu_image.message_of((tmp_path / "netns-12.img").read_bytes())) == [(11, 0, 7)]
    assert linked.read_bytes() == _image(userns), "the dump's own image (a hard link) changed"
    with pytest.raises(ForkError):
        criu_image.give_copy_its_uids(tmp_path, {0: 1}, {0: 1})  # no host id for uid 1000


# -- the pipes a restore hands the agent's lasting processes (hci_envs.fork.kept) --------------------------------
class _NoTree:
    """The test seam for a restored tree: no process of it runs (the pipes are what is tested here)."""

    def pids(self) -> dict[int, int]:
        return {}


def test_a_pipe_end_is_known_by_its_inode_and_direction(tmp_path: Path):
    import os

    from hci_envs.fork.kept import _pipe

    r, w = os.pipe()
    try:
        inode = os.fstat(r).st_ino
        assert _pipe(r) == (inode, True) and _pipe(w) == (inode, False)
        with open(tmp_path / "file", "w") as f:
            assert _pipe(f.fileno()) is None
    finally:
        os.close(r)
        os.close(w)


def test_a_restore_gets_one_new_pipe_per_dumped_pipe_the_right_way_round():
    import os

    from hci_envs.fork.kept import KeptSpec, NewPipes

    # a shell read from one pipe (0) and wrote to another (1 and 2, one pipe); an interpreter had a pipe each way
    shell = KeptSpec("shell", 10, {0: (100, True), 1: (101, False), 2: (101, False)}, standard=(0, 1))
    worker = KeptSpec("worker", 20, {5: (200, True), 6: (201, False)})
    pipes = NewPipes([shell, worker])
    try:
        tree = pipes.tree_ends()
        assert set(tree) == {100, 101, 200, 201}
        assert [_reads(tree[i]) for i in (100, 101, 200, 201)] == [True, False, True, False]
        kept = pipes.processes(_NoTree())  # type: ignore[arg-type]
    finally:
        pipes.close()  # the tree's ends are the restore's: closed here once it has them
    with pytest.raises(OSError):
        os.fstat(tree[100])
    restored = kept[10]
    assert restored.pid > 4_000_000 and restored.stdin is not None and restored.stdout is not None
    # the server's end of what the process writes on 2 is a descriptor of its own (1's is stdout)
    err = restored.take_end(2)
    assert _reads(err) and os.fstat(err).st_ino == os.fstat(restored.stdout.fileno()).st_ino
    with pytest.raises(LookupError):
        restored.take_end(2)
    to, from_ = kept[20].take_end(5), kept[20].take_end(6)
    assert not _reads(to) and _reads(from_)
    for fd in (err, to, from_):
        os.close(fd)
    restored.close_ends()
    kept[20].close_ends()


def _reads(fd: int) -> bool:
    import fcntl
    import os

    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
