"""Human demonstrations: the VNC tap, the event-to-action reducer, the episode store, replay and export.

    from hci_envs.recorders import Recorder, load_episode, replay_episode, reduce_events
"""

from .recorder import Recorder
from .recovery import recover_episodes
from .reducer import ReducedAction, Reducer, Thresholds, Unreduced, reduce_events
from .store import Episode, EpisodeFormatError, load_episode

__all__ = [
    "Episode", "EpisodeFormatError", "Recorder", "ReducedAction", "Reducer", "Thresholds", "Unreduced",
    "load_episode", "recover_episodes", "reduce_events", "replay_episode",
]


def __getattr__(name: str):  # replay pulls in the desktop runtime; import it only when asked for
    if name == "replay_episode":
        from .replay import replay_episode

        return replay_episode
    raise AttributeError(name)
