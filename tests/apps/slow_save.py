"""An app that answers late and in stages, as a busy machine makes any app answer: "s" marks the document
saved 300 ms after the key and redraws its status bar 500 ms after that; "r" brings back the unsaved look at
once; "l" marks it saved 3 s after the key, later than a recorder waits before it writes an action with
nothing after it (an app on a very busy machine); "c" copies "slowly copied" to the clipboard from inside a handler that is busy for 800 ms first, as an app
that has not got round to its keys yet. Standard library only.

    python3 slow_save.py
"""

import time
import tkinter as tk

root = tk.Tk()
root.title("slow save")
root.geometry("500x300+40+40")
canvas = tk.Canvas(root, width=500, height=300, bg="white", highlightthickness=0)
canvas.pack(fill="both", expand=True)
title = canvas.create_text(250, 60, text="*notes.txt (unsaved)", font=("DejaVu Sans", 20))
status = canvas.create_rectangle(0, 260, 500, 300, fill="#c04040", outline="")


def saved() -> None:
    canvas.itemconfigure(title, text="notes.txt")
    root.after(500, lambda: canvas.itemconfigure(status, fill="#40a040"))


def key(event: tk.Event) -> None:
    if event.keysym == "s":
        root.after(300, saved)
    elif event.keysym == "l":
        root.after(3000, saved)
    elif event.keysym == "c":
        time.sleep(0.8)
        root.clipboard_clear()
        root.clipboard_append("slowly copied")
    elif event.keysym == "r":
        canvas.itemconfigure(title, text="*notes.txt (unsaved)")
        canvas.itemconfigure(status, fill="#c04040")


root.bind("<Key>", key)
root.focus_force()
root.mainloop()
