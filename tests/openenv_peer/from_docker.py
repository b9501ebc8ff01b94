"""OpenEnv's own from_docker_image with our image: it maps only port 8000 and passes env_vars. The server
inside needs HCI_ENVS_ALLOW_NO_TOKENS=1, since OpenEnv's docker path sends no token."""

import json
import sys

from openenv.core import GenericEnvClient

image = sys.argv[1]
env = GenericEnvClient.from_docker_image(image, env_vars={"HCI_ENVS_ALLOW_NO_TOKENS": "1"}).sync()
with env:
    result = env.reset()
    clicked = env.step({"type": "click", "x": 90, "y": 50})
    print(json.dumps({"width": result.observation["screenshot"]["width"],
                      "clicked": clicked.observation["text"].startswith("clicked")}))
