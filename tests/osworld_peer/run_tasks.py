"""Runs OSWorld-format tasks through OSWorld's own DesktopEnv (desktop-env, in its own venv) on hci-envs
desktops, as a user with an OSWorld checkout would: reset(task_config=...), step(pyautogui code), evaluate().

    python run_tasks.py SPEC.json     (prints one JSON document: the results)

SPEC: {"tasks": [task files], "solutions": {id: [action or {"wait_for_tree": text}]} or null (the do-nothing
agent), "cache_dir": path,
"action_space": "pyautogui" (code strings) or "computer_13" (action dicts),
"screen_size": [w, h], "a11y": bool, "probe": shell command run after each evaluate (its output is kept),
"after_all": shell command run after a last reset with no task, "placement": "local" or "docker",
"score_untouched": bool (each task is also scored right after its reset, before any step: what the do-nothing
agent would score, without a second pass; a task whose evaluator has post-configuration steps, which change the
desktop, is reset again before its steps)}.
"""

import json
import sys
import time

from hci_envs.osworld import DesktopEnv
from hci_envs.osworld.report import evaluating_changes_the_desktop, solution_step


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    started = time.monotonic()
    env = DesktopEnv(action_space=spec.get("action_space", "pyautogui"), screen_size=tuple(spec.get("screen_size", (1280, 800))),
                     require_a11y_tree=spec.get("a11y", False), cache_dir=spec["cache_dir"], headless=True,
                     placement=spec.get("placement", "local"))
    results = {"start_s": round(time.monotonic() - started, 2), "tasks": []}
    try:
        for path in spec["tasks"]:
            task = json.loads(open(path).read())
            t0 = time.monotonic()
            obs = env.reset(task_config=task)
            untouched, tu = None, time.monotonic()
            if spec.get("score_untouched"):
                untouched = float(env.evaluate())
                if evaluating_changes_the_desktop(task):
                    obs = env.reset(task_config=task)
            t1 = time.monotonic()
            for code in (spec.get("solutions") or {}).get(task["id"], []):
                stepped = solution_step(env, code)
                obs = stepped[0] if stepped is not None else obs
            t2 = time.monotonic()
            score = env.evaluate()
            t3 = time.monotonic()
            probe = None
            if spec.get("probe"):
                probe = env.controller.execute_python_command(
                    f"import subprocess; print(subprocess.run({spec['probe']!r}, shell=True, capture_output=True, "
                    f"text=True).stdout, end='')")["output"]
            results["tasks"].append({
                "id": task["id"], "score": float(score), "untouched_score": untouched,
                "reset_s": round(tu - t0, 2), "untouched_s": round(t1 - tu, 2), "steps_s": round(t2 - t1, 2),
                "evaluate_s": round(t3 - t2, 2), "screenshot_png": (obs["screenshot"] or b"")[:8] == b"\x89PNG\r\n\x1a\n",
                "a11y": obs["accessibility_tree"] is not None and "desktop-frame" in obs["accessibility_tree"],
                "instruction": obs["instruction"], "probe": probe})
        if spec.get("after_all"):
            env.reset()  # no task: OSWorld reverts a used environment to its snapshot first
            results["after_all"] = env.controller.execute_python_command(
                f"import subprocess; print(subprocess.run({spec['after_all']!r}, shell=True, capture_output=True, "
                f"text=True).stdout, end='')")["output"]
        results["platform"] = env.vm_platform
        results["screen"] = env.vm_screen_size
    finally:
        env.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
