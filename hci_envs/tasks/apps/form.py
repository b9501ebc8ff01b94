"""A sign-up form: name, email, age, country, newsletter, plan, and Submit.

    python3 -m hci_envs.tasks.apps.form STATE_FILE

Submit writes the values to the state file under "submitted" (and shows "Thanks!"); the state file always
holds the current values and every widget's screen geometry.
"""

from __future__ import annotations

import sys
import tkinter as tk

from .tk_state import geometry, on_screen, save_every, write_state

COUNTRIES = ["Argentina", "Brazil", "Canada", "Denmark", "Egypt", "France", "Germany", "India", "Japan",
             "Kenya", "Mexico", "Norway", "Portugal", "Spain", "Sweden", "Vietnam"]


def main() -> None:
    path = sys.argv[1]
    root = tk.Tk()
    root.title("Sign-up form")
    root.geometry("520x560+40+40")
    font = ("DejaVu Sans", 12)
    fields: dict[str, tk.Entry] = {}
    for row, (key, label) in enumerate((("name", "Name"), ("email", "Email"), ("age", "Age"))):
        tk.Label(root, text=label, font=font).place(x=20, y=20 + row * 44, width=90, height=30)
        entry = tk.Entry(root, font=font, insertofftime=0)
        entry.place(x=120, y=20 + row * 44, width=360, height=30)
        fields[key] = entry
    tk.Label(root, text="Country", font=font).place(x=20, y=152, width=90, height=30)
    countries = tk.Listbox(root, font=font, exportselection=False)
    for c in COUNTRIES:
        countries.insert("end", c)
    countries.place(x=120, y=152, width=360, height=150)
    subscribe = tk.BooleanVar(value=False)
    newsletter = tk.Checkbutton(root, text="Send me the newsletter", variable=subscribe, font=font)
    newsletter.place(x=120, y=312, width=300, height=30)
    plan = tk.StringVar(value="basic")
    radios = {}
    for i, name in enumerate(("basic", "pro")):
        radios[name] = tk.Radiobutton(root, text=name.capitalize(), value=name, variable=plan, font=font)
        radios[name].place(x=120 + i * 120, y=352, width=110, height=30)
    status = tk.Label(root, text="", font=font)
    status.place(x=120, y=450, width=360, height=30)
    state: dict = {"submitted": None}

    def values() -> dict:
        chosen = countries.curselection()
        return {"name": fields["name"].get(), "email": fields["email"].get(), "age": fields["age"].get(),
                "country": COUNTRIES[chosen[0]] if chosen else None, "newsletter": subscribe.get(),
                "plan": plan.get()}

    def submit() -> None:
        state["submitted"] = values()
        status.configure(text="Thanks!")
        save()

    submit_button = tk.Button(root, text="Submit", font=font, command=submit)
    submit_button.place(x=120, y=400, width=120, height=36)

    def save() -> None:
        widgets = {**fields, "countries": countries, "newsletter": newsletter, "plan_basic": radios["basic"],
                   "plan_pro": radios["pro"], "submit": submit_button}
        rows = {c: list(countries.bbox(i) or []) for i, c in enumerate(COUNTRIES)}
        write_state(path, {"ready": on_screen(root), **state, "values": values(),
                           "widgets": {k: geometry(w) for k, w in widgets.items()}, "country_rows": rows,
                           "countries_top": countries.nearest(0)})

    fields["name"].focus_set()
    save_every(root, save)
    root.mainloop()


if __name__ == "__main__":
    main()
