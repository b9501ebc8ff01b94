"""Build every image the project ships (and, with --for-tests, the test suite's), offline: the same as
`hci-envs image build`. Run by `python3 -m hci_envs test` before the tests."""

import sys

from hci_envs.cli import main

sys.exit(main(["image", "build", *sys.argv[1:]]))
