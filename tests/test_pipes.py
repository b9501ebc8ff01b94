"""hci_envs.sandbox.pipes: a command's output is read to its last byte, whenever its end is seen."""

import os
import subprocess
import time

import pytest

from hci_envs.sandbox.pipes import OutputBuffer, read_pipes

pytestmark = pytest.mark.fake


def test_what_a_command_writes_as_it_ends_is_read():
    """The command writes its last line and exits between a quiet wait and the check of its end (the race a
    busy machine makes likely): the line is read, not lost."""
    read, write = os.pipe()
    try:
        os.write(write, b"first\n")

        def finished() -> bool:  # the quiet wait is over; the command writes and ends before it is asked
            os.write(write, b"HOME /tmp/own\n")
            return True

        buffer = OutputBuffer(1024)
        assert read_pipes({read: buffer}, time.monotonic() + 5, finished) is None
        assert buffer.text() == "first\nHOME /tmp/own\n"
    finally:
        os.close(read)
        os.close(write)


def test_a_program_left_in_the_background_holds_the_read_no_longer_than_the_grace():
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE)
    try:
        buffer = OutputBuffer(1024)
        assert read_pipes({proc.stdout.fileno(): buffer}, time.monotonic() + 60, lambda: proc.poll() is not None,
                          grace=0.2) is None
        background = int(buffer.text())
        os.kill(background, 0)  # still running, holding the pipe: the read did not wait for it
        os.kill(background, 9)
    finally:
        proc.stdout.close()
        proc.wait()


def test_a_deadline_and_a_runaway_are_said():
    proc = subprocess.Popen(["bash", "-c", "sleep 30"], stdout=subprocess.PIPE)
    try:
        assert read_pipes({proc.stdout.fileno(): OutputBuffer(10)}, time.monotonic() + 0.3,
                          lambda: proc.poll() is not None) == "timeout"
    finally:
        proc.kill()
        proc.stdout.close()
        proc.wait()
    proc = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        buffer = OutputBuffer(10)
        assert read_pipes({proc.stdout.fileno(): buffer}, time.monotonic() + 20, lambda: proc.poll() is not None,
                          runaway=100_000) == "runaway"
        assert len(buffer.data) == 10 and buffer.dropped == buffer.size - 10 > 0
    finally:
        proc.kill()
        proc.stdout.close()
        proc.wait()


def test_what_one_buffer_kept_of_a_stream_goes_on_in_another_with_its_dropped_count():
    """A stream's first bytes kept by one buffer (its size counted in full), taken on by another: the other keeps
    what fits under its own cap, and counts the whole stream, then its own output after it."""
    first = OutputBuffer(4)
    first.add(b"abcdefgh")
    second = OutputBuffer(6)
    second.add_kept(bytes(first.data), first.size)
    second.add(b"XYZ")
    assert (bytes(second.data), second.size, second.dropped) == (b"abcdXY", 11, 5)
