"""``python3 -m hci_envs up|test|install``: the set-up commands of the README (standard library only)."""

import sys

from hci_envs.ops.bootstrap import main

sys.exit(main())
