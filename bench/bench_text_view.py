"""What a text-only model is shown of the screen against what a vision model is shown, in tokens, in one run.

For the first task of each real application (the real-application suite's ``app:`` splits: editor (mousepad),
chromium, LibreOffice, ...), TRL's ``TrlDesktopEnv`` is reset into the task twice on one server: once without
images (the prompt carries the accessibility tree's outline, ``text_view="accessibility"``) and once with (the
prompt carries the screenshot). The text is counted in characters and in tokens; the screenshot in the tokens
vision models bill for it:

- Qwen2.5-VL: one token per 28x28 pixels (14-pixel patches merged 2x2);
- Anthropic's published estimate for an image that needs no resizing: width x height / 750.

Tokens of the text: with ``--tokenizer DIR`` (a tokenizer saved with ``save_pretrained``, read from disk, never
fetched), that tokenizer's count; otherwise the common estimate of 4 characters per token, marked ``~``.

    .venv/bin/python bench/bench_text_view.py [--apps mousepad,chromium,libreoffice] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from common import Report


def text_tokens(text: str, tokenizer: Any) -> tuple[int, bool]:
    """(tokens, exact): the tokenizer's count, or the 4-characters estimate."""
    if tokenizer is None:
        return math.ceil(len(text) / 4), False
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]), True


def image_tokens(width: int, height: int) -> dict[str, int]:
    return {"qwen2.5-vl": math.ceil(width / 28) * math.ceil(height / 28), "anthropic": round(width * height / 750)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", default="editor,browser,writer,calc,files,terminal",
                        help="the app splits to take the first task of (app:NAME); the ones that exist are used")
    parser.add_argument("--tokenizer", help="a local tokenizer folder to count the text's tokens with")
    args = parser.parse_args()

    from hci_envs.client import HciEnvClient
    from hci_envs.trl import TrlDesktopEnv, close_all

    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    report = Report("text_view")
    Text = TrlDesktopEnv.configure("BenchTextView", images=False, tasks="apps", max_sessions=2)
    text_env = Text()
    server = text_env._client  # the auto-started server's client: its task API lists the app splits
    splits = {s["name"] for s in HciEnvClient(server.base_url, control_token=server.control_token).splits()}
    wanted = [app for app in args.apps.split(",") if f"app:{app}" in splits]
    missing = [app for app in args.apps.split(",") if f"app:{app}" not in splits]
    if missing:
        print(f"  no split for {', '.join(missing)}; the app splits are "
              f"{', '.join(sorted(s for s in splits if s.startswith('app:')))}")
    # The screenshot variant on the same server, in a session of its own
    Shot = TrlDesktopEnv.configure("BenchScreenshot", images=True, url=server.base_url,
                                   control_token=server.control_token)
    shot_env = Shot()
    try:
        for app in wanted:
            row = {"split": f"app:{app}", "index": 0}
            started = time.perf_counter()
            prompt = text_env.reset(**row)
            text_ms = (time.perf_counter() - started) * 1000
            blocks = shot_env.reset(**row)
            images = [b["image"] for b in blocks if isinstance(b, dict) and b.get("type") == "image"]
            text = prompt if isinstance(prompt, str) else ""
            tokens, exact = text_tokens(text, tokenizer)
            width, height = images[0].size
            billed = image_tokens(width, height)
            report.value(f"{app}: text view", f"{len(text)} chars, {'' if exact else '~'}{tokens} tokens "
                                              f"(reset {text_ms:.0f} ms)")
            report.value(f"{app}: screenshot {width}x{height}",
                         f"{billed['qwen2.5-vl']} tokens (Qwen2.5-VL), {billed['anthropic']} (Anthropic)")
            report.value(f"{app}: text / screenshot (Qwen2.5-VL)", f"{tokens / billed['qwen2.5-vl']:.2f}")
            report.rows[app] = {"text_chars": len(text), "text_tokens": tokens, "exact": exact,
                                "screenshot": [width, height], **{f"image_tokens_{k}": v for k, v in billed.items()}}
    finally:
        close_all()
    report.save()


if __name__ == "__main__":
    main()
