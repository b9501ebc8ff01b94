"""A window that never stops changing: a box sweeping across a canvas at about 60 frames per second.

    python3 animate.py [WIDTH HEIGHT [INTERVAL_MS [X Y]]]

Used where a benchmark needs every screenshot to be new work, and to count the frames a VNC viewer gets.
Standard library only.
"""

import sys
import tkinter as tk

width, height = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (600, 400)
interval = int(sys.argv[3]) if len(sys.argv) > 3 else 16  # ms between frames: 16 is about 60 fps
root = tk.Tk()
root.title("hci-envs animation")
left, top = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (0, 0)
root.geometry(f"{width}x{height}+{left}+{top}")  # the whole window on screen: every frame is new work
canvas = tk.Canvas(root, width=width, height=height, bg="#202040", highlightthickness=0)
canvas.pack(fill="both", expand=True)
box = canvas.create_rectangle(0, height // 3, 80, height // 3 + 80, fill="#f0c020", outline="")
label = canvas.create_text(width // 2, height - 30, text="0", fill="white", font=("DejaVu Sans", 20))
frame = [0]


def tick() -> None:
    frame[0] += 1
    x = (frame[0] * 7) % (width - 80)
    canvas.coords(box, x, height // 3, x + 80, height // 3 + 80)
    canvas.itemconfigure(label, text=str(frame[0]))
    root.after(interval, tick)


tick()
root.mainloop()
