"""Operating hci-envs: ``cli`` (the ``hci-envs`` command), ``bootstrap`` (``python3 -m hci_envs up | test |
install``, standard library only) and ``images`` (the Docker images, built offline)."""
