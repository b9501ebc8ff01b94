"""A small grid game: move the blue player with the arrow keys; reach the star, pick up coins, or click
the target as it jumps around.

    python3 -m hci_envs.tasks.apps.game STATE_FILE MODE     (MODE: goal, coins or targets)
"""

from __future__ import annotations

import random
import sys
import tkinter as tk

from .tk_state import geometry, on_screen, save_every, write_state

COLS, ROWS, CELL = 10, 7, 48
LAYOUTS = {
    "goal": {"player": (1, 1), "goal": (8, 5), "coins": []},
    "coins": {"player": (0, 3), "goal": None, "coins": [(3, 1), (6, 5)]},
    "targets": {"player": (0, 0), "goal": None, "coins": []},
}


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    layout = LAYOUTS[mode]
    rng = random.Random(7)
    root = tk.Tk()
    root.title(f"Grid game: {mode}")
    root.geometry(f"{COLS * CELL}x{ROWS * CELL + 40}+60+60")
    canvas = tk.Canvas(root, width=COLS * CELL, height=ROWS * CELL, bg="#f4f4f4", highlightthickness=0)
    canvas.pack()
    label = tk.Label(root, text="", font=("DejaVu Sans", 12))
    label.pack()
    state = {"mode": mode, "player": list(layout["player"]), "coins": [list(c) for c in layout["coins"]],
             "collected": 0, "reached": False, "hits": 0, "target": [rng.randrange(COLS), rng.randrange(ROWS)],
             "moves": 0}

    def cell(col: int, row: int, pad: int = 6) -> tuple[int, int, int, int]:
        return col * CELL + pad, row * CELL + pad, (col + 1) * CELL - pad, (row + 1) * CELL - pad

    def draw() -> None:
        canvas.delete("all")
        for c in range(COLS + 1):
            canvas.create_line(c * CELL, 0, c * CELL, ROWS * CELL, fill="#dddddd")
        for r in range(ROWS + 1):
            canvas.create_line(0, r * CELL, COLS * CELL, r * CELL, fill="#dddddd")
        if layout["goal"]:
            canvas.create_text(*[v + CELL // 2 for v in (layout["goal"][0] * CELL, layout["goal"][1] * CELL)],
                               text="★", font=("DejaVu Sans", 26), fill="#d4a000")
        for c in state["coins"]:
            canvas.create_oval(*cell(*c, pad=14), fill="#f0c020", outline="#a08000")
        if mode == "targets":
            canvas.create_oval(*cell(*state["target"], pad=8), fill="#d03030", outline="")
        canvas.create_rectangle(*cell(*state["player"]), fill="#3060d0", outline="")
        label.configure(text=f"moves {state['moves']}  coins {state['collected']}  hits {state['hits']}"
                             + ("  GOAL!" if state["reached"] else ""))
        save()

    def move(dc: int, dr: int) -> None:
        col = min(COLS - 1, max(0, state["player"][0] + dc))
        row = min(ROWS - 1, max(0, state["player"][1] + dr))
        state["player"] = [col, row]
        state["moves"] += 1
        if [col, row] in state["coins"]:
            state["coins"].remove([col, row])
            state["collected"] += 1
        if layout["goal"] and (col, row) == tuple(layout["goal"]):
            state["reached"] = True
        draw()

    def click(event: tk.Event) -> None:
        if mode == "targets" and [event.x // CELL, event.y // CELL] == state["target"]:
            state["hits"] += 1
            while True:
                new = [rng.randrange(COLS), rng.randrange(ROWS)]
                if new != state["target"]:
                    state["target"] = new
                    break
            draw()

    for key, delta in (("Left", (-1, 0)), ("Right", (1, 0)), ("Up", (0, -1)), ("Down", (0, 1))):
        root.bind(f"<{key}>", lambda e, d=delta: move(*d))
    canvas.bind("<Button-1>", click)

    def save() -> None:
        write_state(path, {"ready": on_screen(root), **state, "canvas": geometry(canvas), "cell": CELL})

    root.after(50, draw)
    save_every(root, save)
    root.focus_force()
    root.mainloop()


if __name__ == "__main__":
    main()
