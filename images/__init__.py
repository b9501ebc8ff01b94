"""The build contexts of the project's Docker images (Dockerfiles and the files they copy).

Data, not code: the wheel installs this folder as ``hci_envs.image_contexts`` so that ``hci-envs image build``
works from an installed package as from a checkout (see hci_envs/ops/images.py).
"""
