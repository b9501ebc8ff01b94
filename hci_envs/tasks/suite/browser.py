"""Browser tasks (chromium) on a local web site served inside the desktop: bookmarks, history, downloads, forms.

Each variant writes its own small site into the home's ``site`` folder (a shop, articles, a downloads page,
forms that submit with GET, so that what was sent shows in the history). The checkers read chromium's
profile after the browser has been closed (see the ``browser`` check).
"""

from __future__ import annotations

import html
import random
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote_plus

from . import Variant, template
from .apps import browser
from .common import PRODUCTS, WORDS, file_text, key, person, type_text, until, wait

CHECK = {"type": "browser", "app": "browser"}


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;font-size:18px;margin:24px}a{display:inline-block;margin:6px}"
            "td,th{padding:4px 12px;border:1px solid #999}input,button{font-size:18px;margin:4px}</style>"
            f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def _site(rng: random.Random) -> tuple[dict[str, str], dict[str, Any]]:
    """A small site: index, product pages, articles, a downloads page, a contact form and a search form."""
    products = rng.sample(PRODUCTS, 5)
    prices = {p: f"{rng.randint(3, 99)}.{rng.choice(['00', '50', '95', '99'])}" for p in products}
    topics = rng.sample(WORDS, 4)
    downloads = [f"{rng.choice(WORDS)}-{rng.randint(100, 999)}.csv" for _ in range(3)]
    files: dict[str, str] = {}
    links = "".join(f"<li><a href='product-{p}.html'>{p.title()}</a></li>" for p in products)
    articles = "".join(f"<li><a href='article-{t}.html'>All about {t}</a></li>" for t in topics)
    files["site/index.html"] = _page("Corner Shop", f"<h2>Products</h2><ul>{links}</ul><h2>Articles</h2>"
                                     f"<ul>{articles}</ul><p><a href='downloads.html'>Downloads</a> "
                                     "<a href='contact.html'>Contact us</a> <a href='search.html'>Search</a></p>")
    for p in products:
        files[f"site/product-{p}.html"] = _page(
            f"{p.title()} details", f"<p>Price: <b id=price>{prices[p]}</b> EUR</p><p><a href='index.html'>Back</a></p>")
    for t in topics:
        files[f"site/article-{t}.html"] = _page(
            f"All about {t}", f"<p>{' '.join(rng.sample(WORDS, 12))}.</p><p><a href='index.html'>Back</a></p>")
    rows = "".join(f"<li><a href='downloads/{d}'>{d}</a></li>" for d in downloads)
    files["site/downloads.html"] = _page("Downloads", f"<ul>{rows}</ul>")
    for d in downloads:
        files[f"site/downloads/{d}"] = "id,value\n" + "".join(f"{i},{rng.randint(1, 999)}\n" for i in range(5))
    files["site/contact.html"] = _page("Contact us", "<form action='thanks.html' method='get'>"
                                       "<label>Name <input name=name></label><br>"
                                       "<label>Email <input name=email></label><br>"
                                       "<button type=submit>Send</button></form>")
    files["site/thanks.html"] = _page("Thank you", "<p>We received your message.</p>")
    files["site/search.html"] = _page("Search", "<form action='results.html' method='get'>"
                                      "<label>Search <input name=q></label><button type=submit>Go</button></form>")
    files["site/results.html"] = _page("Results", "<p>Nothing found.</p>")
    return files, {"products": products, "prices": prices, "topics": topics, "downloads": downloads}


def site_url(ctx: Any) -> Iterator[Any]:
    """Wait until the site is up and return its address."""
    import json

    def read() -> str | None:
        text = file_text(ctx, ".site.json")
        try:
            return json.loads(text)["url"] if text else None
        except (ValueError, KeyError):
            return None

    return (yield from until(read, "the web site", 30))


ADDRESS_BAR = "Address and search bar"


def go(ctx: Any, url: str) -> Iterator[Any]:
    """Type an address into the address bar and open it. The bar must have the keyboard before the first key
    (on a loaded machine a key typed 300 ms after ctrl+l went to the page, and the rest was searched for), and
    its suggestions a moment to catch up before Return."""
    yield key("ctrl+l")
    yield from until(lambda: any(n["role"] == "entry" and n["name"] == ADDRESS_BAR and "focused" in n.get("states", ())
                                 for n in tree_nodes(ctx)), "the address bar to take the keyboard", 20)
    yield [type_text(url, "keys"), wait(300), key("Return")]


def contact_sent(name: str, email: str) -> str:
    """The page the site's contact form leads to once sent with ``name`` and ``email`` (what checkers look for
    in the browser's history)."""
    return f"thanks.html?name={quote_plus(name)}&email={quote_plus(email)}"


def fill(ctx: Any, fields: list[str]) -> Iterator[Any]:
    """Type into the page's text fields in order (found in the accessibility tree), then press Return."""
    from .common import centre, click, on_screen

    def page_entries() -> list[dict[str, Any]]:
        # the page's own fields, drawn: the address bar is an entry too, there before the page has loaded
        found = [n for n in tree_nodes(ctx) if n["role"] == "entry" and n["name"] != ADDRESS_BAR
                 and on_screen(n)]
        return found if len(found) >= len(fields) else []

    entries = yield from until(page_entries, f"the page's {len(fields)} text fields", timeout=20.0)
    for node, text in zip(entries, fields):
        yield click(*centre(node))
        yield type_text(text, "keys")
    yield key("Return")


def tree_nodes(ctx: Any) -> list[dict[str, Any]]:
    from .common import tree

    return tree(ctx, app="browser")


def _start(ctx: Any) -> Iterator[Any]:
    base = yield from site_url(ctx)
    yield wait(1500)  # the browser's first page, and its window taking the keyboard
    return base


def go_to(ctx: Any, url: str, title: str) -> Iterator[Any]:
    """Open an address and wait until the browser shows its page, whose title is ``title``. The window names the
    address first and the page's title once it has come: a bookmark made in between took the last page's title.
    The window's title on X is read, not the accessibility tree's document: once, loaded, the tree's document did
    not take the new page's name within 30 s while the screen showed the page."""
    yield from go(ctx, url)
    yield from until(lambda: f"{title} - Chromium" in ctx.env.desktop.window_titles(), f"the page {title!r}", 30)


def _bookmark(ctx: Any, page: str, title: str, name: str | None = None) -> Iterator[Any]:
    """Open a page of the site (its title ``title``) and bookmark it, under ``name`` or the name the browser
    suggests (its title)."""

    def name_field(text: str) -> Callable[[], bool]:
        return lambda: any(n["role"] == "entry" and n["name"] == "Bookmark name" and n.get("text") == text
                           and "focused" in n.get("states", ()) for n in tree_nodes(ctx))

    base = yield from _start(ctx)
    yield from go_to(ctx, f"{base}/{page}", title)
    yield key("ctrl+d")
    yield from until(name_field(title), "the bookmark bubble", 20)
    if name is not None:
        yield [key("ctrl+a"), type_text(name, "keys")]
        yield from until(name_field(name), f"the bookmark name {name!r} typed", 20)
    yield key("Return")
    yield from until(lambda: not any(n["role"] == "dialog" and n["name"] == "Bookmark added" for n in tree_nodes(ctx)),
                     "the bookmark bubble to close", 20)


@template("browser-bookmark-page", app="browser")
def bookmark_page(rng: random.Random) -> Variant:
    """Bookmark one product page (the default bookmark name is the page's title)."""
    files, data = _site(rng)
    product = rng.choice(data["products"])
    title = f"{product.title()} details"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _bookmark(ctx, f"product-{product}.html", title)

    return Variant(
        instruction=f"In the browser, open the page of the product \"{product.title()}\" from the shop's start "
                    "page and bookmark it (keep the name the browser suggests).",
        files=files, apps=[browser()],
        checker={**CHECK, "bookmark": {"name": title, "url_contains": f"/product-{product}.html"}},
        oracle=oracle, max_steps=25)


@template("browser-bookmark-named", app="browser")
def bookmark_named(rng: random.Random) -> Variant:
    """Bookmark an article under a name of one's own."""
    files, data = _site(rng)
    topic = rng.choice(data["topics"])
    name = f"Read later: {topic}"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _bookmark(ctx, f"article-{topic}.html", f"All about {topic}", name)

    return Variant(
        instruction=f"In the browser, bookmark the article \"All about {topic}\" with the bookmark name \"{name}\".",
        files=files, apps=[browser()],
        checker={**CHECK, "bookmark": {"name": name, "url_contains": f"/article-{topic}.html"}},
        oracle=oracle, max_steps=25)


@template("browser-download-file", app="browser")
def download_file(rng: random.Random) -> Variant:
    """Download one file from the site's downloads page."""
    files, data = _site(rng)
    wanted = rng.choice(data["downloads"])

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _start(ctx)
        yield from go(ctx, f"{base}/downloads/{wanted}")
        yield from until(lambda: file_text(ctx, f"Downloads/{wanted}"), "the download", 20)
        yield wait(1000)

    return Variant(
        instruction=f"In the browser, go to the shop's Downloads page and download the file {wanted}.",
        files=files, apps=[browser()],
        checker={"type": "all", "checks": [{**CHECK, "download": wanted},
                                           {"type": "file", "path": f"Downloads/{wanted}", "contains": "id,value"}]},
        oracle=oracle, max_steps=25)


@template("browser-contact-form", app="browser")
def contact_form(rng: random.Random) -> Variant:
    """Fill in and send the contact form."""
    files, _data = _site(rng)
    name = person(rng)
    email = f"{name.split()[0].lower()}.{rng.randint(10, 99)}@example.org"
    sent = contact_sent(name, email)

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _start(ctx)
        yield from go(ctx, f"{base}/contact.html")
        yield from fill(ctx, [name, email])
        yield wait(1500)

    return Variant(
        instruction=f"In the browser, open the shop's contact form, enter the name {name} and the email {email}, "
                    "and send it.",
        files=files, apps=[browser()],
        checker={**CHECK, "visited": {"url_contains": sent}}, oracle=oracle, max_steps=30)


@template("browser-search", app="browser")
def search(rng: random.Random) -> Variant:
    """Search the site for a word."""
    files, _data = _site(rng)
    term = rng.choice(WORDS)

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _start(ctx)
        yield from go(ctx, f"{base}/search.html")
        yield from fill(ctx, [term])
        yield wait(1500)

    return Variant(
        instruction=f"Use the shop's Search page in the browser to search for \"{term}\".",
        files=files, apps=[browser()],
        checker={**CHECK, "visited": {"url_contains": f"results.html?q={term}"}}, oracle=oracle, max_steps=25)


@template("browser-visit-articles", app="browser")
def visit_articles(rng: random.Random) -> Variant:
    """Read two given articles (partial credit: one of them)."""
    files, data = _site(rng)
    first, second = rng.sample(data["topics"], 2)

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _start(ctx)
        for topic in (first, second):
            yield from go_to(ctx, f"{base}/article-{topic}.html", f"All about {topic}")

    return Variant(
        instruction=f"In the browser, open the articles \"All about {first}\" and \"All about {second}\".",
        files=files, apps=[browser()],
        checker={"type": "weighted", "parts": [
            {"name": first, "check": {**CHECK, "visited": {"url_contains": f"/article-{first}.html"}}},
            {"name": second, "check": {**CHECK, "visited": {"url_contains": f"/article-{second}.html"}}}]},
        oracle=oracle, max_steps=30)
