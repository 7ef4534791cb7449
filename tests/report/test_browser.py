"""The report in headless Chromium (Debian's `chromium`; skipped with a reason if missing).

The page's script marks <body> when it has rendered (`data-rendered`, token counts,
`data-errors` for uncaught errors); chromium's log gives every console message. A
screenshot of the tiny run's report is saved to $TRIPOD_TEST_ARTIFACTS (else a tmp dir).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from tripod.report.html import build_report
from tripod.report.records import episode_json, iteration_path, write_trajectories

from .helpers import HOSTILE, hostile_stats, hostile_trajectories


def body_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, "no <body> in the DOM"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


class Elements(HTMLParser):
    """Every element of a DOM dump with its attributes (what the browser really built)."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_report_renders_with_curves_and_coloured_tokens(tiny_run, browser, artifact_dir,
                                                        tmp_path):
    page = build_report(tiny_run.run_dir, tmp_path / "report.html")
    load = browser.load(page)
    assert load.console == [], "console messages:\n" + "\n".join(load.console)
    body = body_attrs(load.dom)
    assert body["data-rendered"] == "1" and body["data-errors"] == "0"
    assert int(body["data-episodes"]) == 2              # a group of the last iteration
    assert int(body["data-coloured"]) == int(body["data-tokens"]) > 0  # all have advantages
    elements = Elements(load.dom).tags
    charts = [a for t, a in elements if t == "svg" and a.get("class") == "chart"]
    assert len(charts) >= 11  # 10 main curves (some absent here) + more + evaluations
    assert sum(t == "polyline" for t, _ in elements) >= 10
    tokens = [a for t, a in elements if t == "span" and "data-info" in a]
    assert tokens and all("background-color" in (a.get("style") or "") for a in tokens)
    assert all("advantage" in (a.get("title") or "") for a in tokens)
    shot = browser.screenshot(page, artifact_dir / "report-tiny-run.png")
    print(f"screenshot: {shot}; page load {load.seconds:.2f}s, in-page render "
          f"{body.get('data-render-ms')} ms, {page.stat().st_size / 1e3:.0f} kB")


def _hostile_run(tmp_path, tokenizer):
    run = tmp_path / "run"
    trajs = hostile_trajectories(tokenizer)
    stats = hostile_stats(trajs)
    path = write_trajectories(iteration_path(run, 1).with_suffix(""), trajs, tokenizer, 1, stats)
    context = episode_json(trajs[0], tokenizer, 1, stats=stats[0])
    context.update(end="context_limit", won=False, episode_id=99)
    with path.open("a") as f:
        f.write(json.dumps(context) + "\n")
    return build_report(run, tmp_path / "hostile.html")


def test_hostile_text_renders_as_text_and_never_runs(tmp_path, tokenizer, browser):
    page = _hostile_run(tmp_path, tokenizer)
    load = browser.load(page)
    assert load.console == [], "console messages:\n" + "\n".join(load.console)
    body = body_attrs(load.dom)
    assert "data-pwned" not in body, f"a payload ran: {body['data-pwned']}"
    assert body["data-rendered"] == "1" and body["data-errors"] == "0"
    elements = Elements(load.dom).tags
    assert [t for t, _ in elements if t in ("img", "iframe", "object")] == []
    assert sum(t == "script" for t, _ in elements) == 2  # data block + viewer
    assert not [a for _, a in elements if {"onerror", "onload"} & set(a)]
    assert re.search(r"<title>tripod report: run</title>", load.dom)
    # The payloads are on the page as text (serialised escaped), surrogates as U+FFFD.
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" \
        in load.dom
    assert "lone \ufffd surrogate" in load.dom
    assert "[bold red]rich markup[/]" in load.dom
    assert "\u241b[31mANSI\u241b[0m" in load.dom  # ESC shown as its control picture
    masked = [a for t, a in elements if t == "span" and "data-info" in a
              and "masked" in (a.get("class") or "")]
    assert masked, "the env-error episode's tokens are outside the loss"
    for payload in HOSTILE[:3]:
        assert payload not in load.dom  # never serialised as markup


def test_filters_and_links_select_episodes(tmp_path, tokenizer, browser):
    page = _hostile_run(tmp_path, tokenizer)
    cases = {"": 5,                                                  # group 0: all episodes
             "#hide=won,lost": 3,
             "#hide=won,lost,truncated,context_limit": 1,             # the env error
             "#hide=won,lost,env_error,truncated": 1,                 # the context limit
             "#group=1&hide=context_limit": 4}
    for fragment, shown in cases.items():
        load = browser.load(page, fragment)
        body = body_attrs(load.dom)
        assert body["data-errors"] == "0" and load.console == []
        assert int(body["data-episodes"]) == shown, fragment
    load = browser.load(page, "#hide=won,lost,truncated,context_limit")
    assert load.dom.count("badge env_error") == 1


def test_page_script_alone_keeps_the_dom_well_formed(tmp_path, tokenizer, browser):
    """The builder replaces lone surrogates; the page's script does too, so a payload that
    still holds one (a hand-edited report, another writer) neither breaks nor crashes."""
    page = _hostile_run(tmp_path, tokenizer)
    text = page.read_text(encoding="ascii")
    assert "lone \\ufffd surrogate" in text
    page.write_text(text.replace("lone \\ufffd surrogate", "lone \\udcff surrogate"),
                    encoding="ascii")
    load = browser.load(page, "#hide=won,lost,env_error,context_limit")
    assert body_attrs(load.dom)["data-errors"] == "0" and load.console == []
    assert "lone \ufffd surrogate" in load.dom
