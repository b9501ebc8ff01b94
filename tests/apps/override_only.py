"""An app whose only window is override-redirect (as a kiosk, a splash or an on-screen keyboard may be): the
window manager never manages it, so no managed window ever maps."""

import tkinter as tk

root = tk.Tk()
root.overrideredirect(True)  # before the first map: the window maps override-redirect
root.geometry("320x200+100+100")
tk.Label(root, text="no window manager here").pack(expand=True)
root.mainloop()
