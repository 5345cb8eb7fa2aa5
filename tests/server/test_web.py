"""The web page (GET /) in headless Chromium, driven by selenium through
Debian's chromedriver (never selenium's own driver manager, which would
download one). Replies come from the real model, greedy where a test compares
text: a reply streams in and equals the API's answer; Markdown renders, a code
block is highlighted and copied; markup in a reply stays text and runs
nothing; the view follows a stream until the user scrolls up; conversations
survive a reload and are switched, renamed and deleted; a conversation
reopened after a restart of a server with --cache-dir reports the tokens it
took from the disk cache; the settings reach
the request; tool calls (qwen2.5-coder:0.5b with a tools setting) show as
blocks with the function's name and arguments, and the JSON schema setting is
sent as response_format or, when it is not JSON, named beside the field and
not sent; the layout holds at 390 px; the planner shows `tally kv-plan`'s
numbers. With TALLY_SCREENSHOTS=DIR the screenshots of docs/screenshots are
written to DIR (serve-chat.png, serve-planner.png, serve-mobile.png)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT, default_model, find_program, need, tally_bin, tally_home

CHROMIUM_DIRS = ("/usr/bin", "/usr/lib/chromium")
CODE_PROMPT = "Write a Python function that adds two numbers."
# SmolLM2 repeats this greedily, markup and all: the payload really comes from the model.
MARKUP_PROMPT = "Repeat exactly: <img src=x onerror=\"alert('img')\"> and <script>alert('script')</script>"


@pytest.fixture
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need(False, "selenium is not installed (scripts/setup_test_env.sh)")
    chromium = find_program("chromium", *CHROMIUM_DIRS)
    driver = find_program("chromedriver", *CHROMIUM_DIRS)
    need(chromium is not None and driver is not None,
         "chromium and chromium-driver are not installed (scripts/setup.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1100,820", "--hide-scrollbars", "--force-device-scale-factor=1", "--no-first-run",
              "--disable-extensions", "--disable-background-networking", "--disable-sync",
              "--disable-smooth-scrolling"):
        opts.add_argument(a)
    profile = tempfile.TemporaryDirectory(prefix="tally-chromium-")  # a fresh localStorage for each test
    opts.add_argument(f"--user-data-dir={profile.name}")
    # An explicit driver path: selenium then runs it as it is and never fetches one.
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    d.set_page_load_timeout(60)
    try:
        yield d
    finally:
        d.quit()
        profile.cleanup()


def screenshot(d, name: str) -> None:
    out = os.environ.get("TALLY_SCREENSHOTS")
    if out:
        p = pathlib.Path(out)
        p = p if p.is_absolute() else ROOT / p
        p.mkdir(parents=True, exist_ok=True)
        assert d.save_screenshot(str(p / name))


def by(css: str):
    from selenium.webdriver.common.by import By
    return By.CSS_SELECTOR, css


def waiter(d, timeout: float = 180):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    # An element can be replaced between finding and reading it (the page redraws a streaming reply).
    return WebDriverWait(d, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException])


def open_page(d, url: str) -> None:
    d.get(url + "/")
    assert d.title == "tally"
    waiter(d, 60).until(lambda d: "context" in d.find_element(*by("#model")).text)


def set_settings(d, **values) -> None:
    if not d.find_element(*by("#settings")).is_displayed():
        d.find_element(*by("#toggle-settings")).click()
    for k, v in values.items():
        el = d.find_element(*by("#s-" + k))
        el.clear()
        el.send_keys(str(v))
    d.find_element(*by("#toggle-settings")).click()


def send(d, text: str, timeout: float = 240):
    """Types `text`, sends it and waits for the reply to finish; returns the reply's element."""
    n = len(d.find_elements(*by("#log .assistant")))
    d.find_element(*by("#input")).send_keys(text)
    d.find_element(*by("#send")).click()

    def finished(d):
        replies = d.find_elements(*by("#log .assistant"))
        return len(replies) == n + 1 and replies[-1].find_element(*by(".stats")).text and \
            d.find_element(*by("#send")).is_enabled()
    waiter(d, timeout).until(finished)
    return d.find_elements(*by("#log .assistant"))[-1]


def stored(d) -> tuple[str | None, dict]:
    """The id of the current conversation and every conversation in localStorage, by id."""
    cur, convs = d.execute_script("""
      const all = {};
      for (const k of Object.keys(localStorage))
        if (k.startsWith('tally.conv.')) { const c = JSON.parse(localStorage.getItem(k)); all[c.id] = c; }
      return [localStorage.getItem('tally.current'), all];""")
    return cur, convs


# A spy on the page's chat requests (window.__bodies): they still go to the server as they are.
SPY = """window.__bodies = [];
  const f = window.fetch;
  window.fetch = (u, o) => { if (String(u).includes('/chat/')) window.__bodies.push(JSON.parse(o.body)); return f(u, o); };"""


def current_messages(d) -> list[dict]:
    cur, convs = stored(d)
    return [{"role": m["role"], "content": m["content"]} for m in convs[cur]["messages"]]


def api_reply(server, messages: list[dict], **fields) -> str:
    status, _, out = server.post("/v1/chat/completions", {"messages": messages, **fields})
    assert status == 200, out
    return json.loads(out)["choices"][0]["message"]["content"]


def test_a_reply_streams_in_equals_the_api_answer_and_a_second_turn_hits_the_cache(server, browser):
    d = browser
    open_page(d, server.url)
    assert d.find_element(*by("#empty")).is_displayed()
    set_settings(d, temperature=0, max_tokens=96)
    # Every change of the reply's text as it happens (a streamed reply changes many times).
    d.execute_script("""
      window.__lengths = [];
      new MutationObserver(() => {
        const a = document.querySelectorAll('#log .assistant .body');
        if (a.length) window.__lengths.push(a[a.length - 1].textContent.length);
      }).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});""")
    q = "What is a KV cache in a language model?"
    reply = send(d, q)
    lengths = d.execute_script("return window.__lengths")
    assert len({n for n in lengths if n > 0}) >= 5, f"the reply did not arrive in pieces: {lengths}"
    assert d.find_element(*by("#log .user .body")).text == q
    stats = reply.find_element(*by(".stats")).text
    assert "tokens/s" in stats and "cached" in stats and "first token" in stats, stats
    assert d.find_element(*by("#chat-error")).text == ""
    assert not d.find_elements(*by("#empty"))
    # The page's text, as kept in localStorage, is the server's greedy answer to the same request.
    msgs = current_messages(d)
    assert msgs[0] == {"role": "user", "content": q} and msgs[1]["role"] == "assistant"
    assert msgs[1]["content"] == api_reply(server, [msgs[0]], temperature=0, max_tokens=96)
    assert d.find_element(*by("#chat-title")).text == q[:60]

    # A second turn: its prompt holds the first turn, which the prefix cache has.
    reply2 = send(d, "Say it in one sentence.")
    stats2 = reply2.find_element(*by(".stats")).text
    cached = int(re.search(r"(\d+) cached", stats2).group(1))
    assert cached > 0, stats2
    assert len(current_messages(d)) == 4


def test_markdown_renders_a_highlighted_code_block_with_a_copy_button(server, browser):
    d = browser
    open_page(d, server.url)
    set_settings(d, temperature=0, max_tokens=64)
    reply = send(d, CODE_PROMPT)
    raw = current_messages(d)[1]["content"]
    m = re.search(r"```python\n(.*?)\n```", raw, re.S)
    assert m, f"the model's reply has no python block to render: {raw!r}"
    body = reply.find_element(*by(".body"))
    assert "```" not in body.text, "the fences were shown, not rendered"
    code = body.find_element(*by("pre code.hljs"))
    assert code.get_attribute("textContent").rstrip("\n") == m.group(1)
    # highlight.js marked up the keyword and the function's name.
    assert [k.text for k in code.find_elements(*by(".hljs-keyword"))][:1] == ["def"]
    assert code.find_elements(*by(".hljs-title"))
    # Copy: the block's code reaches the clipboard.
    d.execute_cdp_cmd("Browser.grantPermissions", {"origin": server.url,
                                                     "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    button = body.find_element(*by("pre button.copy"))
    button.click()
    waiter(d, 10).until(lambda d: button.text == "Copied")
    clip = d.execute_async_script("navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('ERR ' + e))")
    assert clip.rstrip("\n") == m.group(1)
    screenshot(d, "serve-chat.png")


def test_markup_in_a_reply_stays_text_and_runs_nothing(server, browser):
    from selenium.common.exceptions import NoAlertPresentException

    d = browser
    open_page(d, server.url)
    spy = "window.__alerts = []; window.alert = window.confirm = window.prompt = (m) => window.__alerts.push(String(m));"
    d.execute_script(spy)
    set_settings(d, temperature=0, max_tokens=40)
    reply = send(d, MARKUP_PROMPT)
    raw = current_messages(d)[1]["content"]
    # Which of the two the greedy reply repeats depends on the kernel level
    # (AVX-512 and AVX2 differ in a near tie); each one it sends must stay text.
    sent = [m for m in ("<img src=x onerror=\"alert('img')\">", "<script>alert('script')</script>") if m in raw]
    assert sent, f"the model did not send the markup: {raw!r}"

    def check():
        body = d.find_elements(*by("#log .assistant .body"))[-1]
        assert all(m in body.text for m in sent), body.text
        assert not body.find_elements(*by("img, script, [onerror], [onload]"))
        time.sleep(0.5)  # an image's error handler would run once its load failed
        assert d.execute_script("return window.__alerts") == []
        with pytest.raises(NoAlertPresentException):
            d.switch_to.alert.text

    check()
    # The same reply drawn again from localStorage after a reload.
    d.refresh()
    open_page(d, server.url)
    d.execute_script(spy)
    check()


def test_the_view_follows_a_streaming_reply_until_the_user_scrolls_up(start_server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    s = start_server("--parallel", "1", "-c", "4096", "--max-tokens", "2048")
    d = browser
    d.set_window_size(900, 600)
    open_page(d, s.url)
    set_settings(d, temperature=0, max_tokens=2000)
    geometry = "const l = document.getElementById('log'); return [l.scrollTop, l.scrollHeight, l.clientHeight];"
    d.find_element(*by("#input")).send_keys("Write a very long story about a dragon.")
    d.find_element(*by("#send")).click()
    streaming = lambda d: d.find_element(*by("#stop")).is_enabled()
    waiter(d).until(lambda d: d.execute_script(geometry)[1] > d.execute_script(geometry)[2] + 200)
    # While the text grows, the bottom stays in view.
    grown_from = d.execute_script(geometry)[1]
    seen = 0
    while d.execute_script(geometry)[1] < grown_from + 300:
        top, height, client = d.execute_script(geometry)
        assert height - top - client < 30, (top, height, client)
        seen += 1
        assert streaming(d), "the reply ended before the test could watch it"
        time.sleep(0.05)
    assert seen > 1

    # The user scrolls up with the wheel: the view stays where they put it while the text grows.
    log = d.find_element(*by("#log"))
    ActionChains(d).scroll_from_origin(ScrollOrigin.from_element(log), 0, -250).perform()
    below = lambda g: g[1] - g[0] - g[2]  # pixels under the view
    waiter(d, 10).until(lambda d: below(d.execute_script(geometry)) > 150)
    top, height, _ = d.execute_script(geometry)
    waiter(d).until(lambda d: d.execute_script(geometry)[1] > height + 300)
    assert streaming(d), "the reply ended before the test could watch it"
    assert abs(d.execute_script(geometry)[0] - top) <= 1, "the view moved after the user scrolled up"

    # Back at the bottom, it follows again.
    ActionChains(d).scroll_from_origin(ScrollOrigin.from_element(log), 0, 100000).perform()
    height = d.execute_script(geometry)[1]
    waiter(d).until(lambda d: d.execute_script(geometry)[1] > height + 200)
    top, height, client = d.execute_script(geometry)
    assert height - top - client < 30, (top, height, client)
    assert streaming(d), "the reply ended before the test could watch it"
    d.find_element(*by("#stop")).click()
    waiter(d, 30).until(lambda d: "stopped" in d.find_elements(*by("#log .assistant .stats"))[-1].text)


def test_conversations_survive_a_reload_and_are_switched_renamed_and_deleted(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    d = browser
    open_page(d, server.url)
    set_settings(d, temperature=0, max_tokens=12)

    def titles():
        return [li.find_element(*by(".open")).text for li in d.find_elements(*by("#conv-list li"))]

    def shown():
        return [(e.get_attribute("class"), e.find_element(*by(".body")).text) for e in d.find_elements(*by("#log .msg"))]

    assert titles() == []
    send(d, "Name a color.")
    first = shown()
    cur_a, convs = stored(d)
    assert len(first) == 2 and titles() == ["Name a color."]

    # A reload keeps the conversation, its rendering and its stats line.
    stats = d.find_element(*by("#log .assistant .stats")).text
    d.refresh()
    open_page(d, server.url)
    assert shown() == first and titles() == ["Name a color."]
    assert d.find_element(*by("#log .assistant .stats")).text == stats
    assert stored(d) == (cur_a, convs)

    # New chat, a second conversation; the newest is listed first and is the current one.
    d.find_element(*by("#new-chat")).click()
    assert d.find_element(*by("#empty")).is_displayed() and d.find_element(*by("#chat-title")).text == "New chat"
    send(d, "Name an animal.")
    assert len(shown()) == 2 and shown() != first
    assert titles() == ["Name an animal.", "Name a color."]
    assert "on" in d.find_elements(*by("#conv-list li"))[0].get_attribute("class")

    # Switch back: its messages, and it stays current across a reload.
    d.find_elements(*by("#conv-list li .open"))[1].click()
    assert shown() == first
    d.refresh()
    open_page(d, server.url)
    assert shown() == first and stored(d)[0] == cur_a

    # Rename: Enter keeps the new title (in the list, the bar and localStorage); Escape drops it.
    li = d.find_element(*by(f"#conv-list li[data-id='{cur_a}']"))
    li.find_element(*by(".rename")).click()
    # Keys go to the focused title box, its old title selected (the box is gone once Enter takes the new one).
    assert d.switch_to.active_element.get_attribute("value") == "Name a color."
    ActionChains(d).send_keys("Colours", Keys.ENTER).perform()
    assert "Colours" in titles() and d.find_element(*by("#chat-title")).text == "Colours"
    assert stored(d)[1][cur_a]["title"] == "Colours"
    d.find_elements(*by("#conv-list li .rename"))[titles().index("Name an animal.")].click()
    ActionChains(d).send_keys("ignored", Keys.ESCAPE).perform()
    assert sorted(titles()) == ["Colours", "Name an animal."]
    d.refresh()
    open_page(d, server.url)
    assert sorted(titles()) == ["Colours", "Name an animal."]

    # Delete asks for a second click; deleting another conversation leaves the current one shown.
    other = [li for li in d.find_elements(*by("#conv-list li")) if li.get_attribute("data-id") != cur_a][0]
    other_id = other.get_attribute("data-id")
    other.find_element(*by(".delete")).click()
    assert other.find_element(*by(".delete")).text == "Delete?" and other_id in stored(d)[1]
    d.find_element(*by(f"#conv-list li[data-id='{other_id}'] .delete")).click()
    assert titles() == ["Colours"] and other_id not in stored(d)[1] and shown() == first
    # Deleting the current one leaves an empty new chat.
    d.find_element(*by(f"#conv-list li[data-id='{cur_a}'] .delete")).click()
    d.find_element(*by(f"#conv-list li[data-id='{cur_a}'] .delete")).click()
    assert titles() == [] and stored(d)[1] == {} and d.find_element(*by("#empty")).is_displayed()


def test_a_conversation_reopened_after_a_restart_reports_its_tokens_from_disk(start_server, browser, tmp_path):
    folder = tmp_path / "kv"
    first = start_server("--cache-dir", str(folder), "--parallel", "1", "-c", "2048")
    port = first.port
    d = browser
    open_page(d, first.url)
    set_settings(d, temperature=0, max_tokens=24)
    question = "Name three colours of the rainbow."
    send(d, question)
    assert first.stop() == 0, first.log()[-2000:]
    assert list(folder.rglob("*.kvb")), "no block was written to the disk tier"

    # The same origin (so the same localStorage), a new process: the RAM cache is empty.
    second = start_server("--cache-dir", str(folder), "--parallel", "1", "-c", "2048", "--port", str(port))
    d.refresh()
    open_page(d, second.url)
    d.find_element(*by("#new-chat")).click()
    assert d.find_element(*by("#empty")).is_displayed()
    [o for o in d.find_elements(*by("#conv-list li .open")) if o.text == question][0].click()  # reopened from the list
    assert len(d.find_elements(*by("#log .msg"))) == 2
    reply = send(d, "Which one is warmest?")
    stats = reply.find_element(*by(".stats")).text
    m = re.search(r"(\d+) cached \((\d+) from disk\)", stats)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) == int(m.group(1)), stats
    status, _, metrics = second.get("/metrics")
    assert status == 200
    hits = re.search(r"^tally_kv_disk_hits_total (\d+)", metrics.decode(), re.M)
    assert hits and int(hits.group(1)) > 0, metrics


def test_the_settings_reach_the_request(server, browser):
    d = browser
    open_page(d, server.url)
    # A spy on the page's requests: they still go to the server as they are.
    d.execute_script(SPY)
    system = "You are a pirate. Answer like a pirate."
    set_settings(d, system=system, temperature=1, top_p=0.9, max_tokens=12, seed=1234)
    reply = send(d, "Tell me about the sea.")
    body = d.execute_script("return window.__bodies")[-1]
    user = {"role": "user", "content": "Tell me about the sea."}
    assert body["messages"] == [{"role": "system", "content": system}, user]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["stream"]) == (1, 0.9, 12, 1234, True)
    # The server used them: the same seeded sample, cut at 12 tokens.
    text = current_messages(d)[1]["content"]
    fields = {"temperature": 1, "top_p": 0.9, "max_tokens": 12}
    assert text == api_reply(server, [{"role": "system", "content": system}, user], seed=1234, **fields)
    assert any(api_reply(server, [{"role": "system", "content": system}, user], seed=s, **fields) != text
               for s in range(1235, 1240)), "the seed changes nothing: the comparison above proves nothing"
    assert reply.find_element(*by(".stats")).text.endswith("length")

    # Kept across a reload.
    d.refresh()
    open_page(d, server.url)
    assert [d.find_element(*by("#s-" + k)).get_attribute("value") for k in ("system", "temperature", "top_p", "max_tokens", "seed")] \
        == [system, "1", "0.9", "12", "1234"]

    # A setting the page cannot send is named and nothing is sent; one the server refuses is shown, the turn undone.
    d.execute_script(SPY)
    set_settings(d, seed="1.5")
    d.find_element(*by("#input")).send_keys("Hello")
    d.find_element(*by("#send")).click()
    assert "seed must be a whole number" in d.find_element(*by("#settings-error")).text
    assert d.execute_script("return window.__bodies") == []
    set_settings(d, seed="1e")  # text a number box cannot hold: named, not taken as unset
    assert d.find_element(*by("#settings-error")).get_attribute("textContent") == "seed is not a number"
    set_settings(d, seed="", temperature=5)
    d.find_element(*by("#input")).clear()
    d.find_element(*by("#input")).send_keys("Hello")
    d.find_element(*by("#send")).click()
    waiter(d, 30).until(lambda d: "temperature" in d.find_element(*by("#chat-error")).text)
    assert d.find_element(*by("#input")).get_attribute("value") == "Hello"
    assert len(current_messages(d)) == 2 and len(d.find_elements(*by("#log .msg"))) == 2


def test_the_layout_holds_at_390_px(server, browser):
    d = browser
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    open_page(d, server.url)
    rect = lambda css: d.execute_script("return document.querySelector(arguments[0]).getBoundingClientRect().toJSON()", css)
    assert d.execute_script("return window.innerWidth") == 390

    def holds():
        assert d.execute_script("return document.documentElement.scrollWidth") <= 390
        chat, plan, model = rect("#tab-chat"), rect("#tab-plan"), rect("#model")
        assert chat["top"] == plan["top"] and chat["height"] == plan["height"] < 40, (chat, plan)  # one line
        assert plan["right"] <= 390 and model["right"] <= 390
        assert rect("header")["height"] < 56
    holds()
    # An empty chat keeps the input at the bottom of the screen.
    form = rect("#chat-form")
    assert abs(form["bottom"] - 844) <= 1 and form["top"] > 844 * 0.8, form
    assert rect("#empty")["top"] > rect("#chat-bar")["bottom"]
    # The conversation list is a drawer.
    assert rect("#convs")["right"] <= 0
    d.find_element(*by("#toggle-convs")).click()
    waiter(d, 5).until(lambda d: rect("#convs")["left"] >= 0)
    d.find_element(*by("#toggle-convs")).click()
    waiter(d, 5).until(lambda d: rect("#convs")["right"] <= 0)

    set_settings(d, temperature=0, max_tokens=64)
    send(d, CODE_PROMPT)
    holds()
    assert abs(rect("#chat-form")["bottom"] - 844) <= 1
    screenshot(d, "serve-mobile.png")
    d.find_element(*by("#tab-plan")).click()
    waiter(d, 30).until(lambda d: len(d.find_elements(*by("#plan-table tbody tr"))) > 1)
    holds()


def cli_plan(*args: str) -> dict:
    out = subprocess.run([tally_bin(), "kv-plan", "--json", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_planner_shows_the_cli_numbers_with_weights_budget_and_crossover(server, browser):
    d = browser
    d.set_window_size(1100, 1000)  # the whole table in the screenshot
    open_page(d, server.url)
    d.find_element(*by("#tab-plan")).click()
    assert d.find_element(*by("#plan")).is_displayed() and not d.find_element(*by("#chat")).is_displayed()
    waiter(d, 30).until(lambda d: len(d.find_elements(*by("#plan-table tbody tr"))) > 1)

    def table():
        head = [th.text for th in d.find_elements(*by("#plan-table thead th"))]
        rows = {tr.get_attribute("data-row"): [td for td in tr.find_elements(*by("td"))[1:]]
                for tr in d.find_elements(*by("#plan-table tbody tr"))}
        return head, rows

    def fill(**fields):
        for k, v in fields.items():
            el = d.find_element(*by("#p-" + k))
            el.clear()
            el.send_keys(v)
        before = d.find_element(*by("#plan-table")).get_attribute("innerHTML")
        d.find_element(*by("#plan-form button[type=submit]")).click()
        waiter(d, 30).until(lambda d: d.find_element(*by("#plan-table")).get_attribute("innerHTML") != before
                            or d.find_element(*by("#plan-error")).text)

    tokens = lambda n: f"{n:,} tokens"
    # The loaded model, its weights from its tensors: crossover as the CLI reads it from the same GGUF.
    cli = cli_plan("-m", str(default_model()))
    head, rows = table()
    assert head[1:] == ["this model: GQA, 3 kv heads", "as MHA: 9 kv heads", "as MQA: 1 kv head"], head
    assert [c.get_attribute("title") for c in rows["per token"]] == [f"{l['bytes_per_token']:,} bytes" for l in cli["layouts"]]
    assert [c.text for c in rows["crossover"]] == [tokens(l["crossover_tokens"]) for l in cli["layouts"]]
    assert "fits budget" not in rows
    assert "the loaded model's tensors" in d.find_element(*by("#plan-summary")).text

    fill(budget="1GiB")
    cli = cli_plan("-m", str(default_model()), "--budget", "1GiB")
    head, rows = table()
    assert [c.text for c in rows["fits budget"]] == [tokens(l["max_tokens"]) for l in cli["layouts"]]
    assert "1.00 GiB" in [div.text.split(maxsplit=1)[1] for div in d.find_elements(*by("#plan-summary div"))
                          if div.text.startswith("budget")]

    # A layout typed in, with weights and a budget of its own.
    fill(layers="32", heads="32", kv="8", hd="128", tokens="4096,32768,131072", weights="16GiB", budget="24GiB")
    cli = cli_plan("--layers", "32", "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "4096,32768,131072",
                   "--weights-bytes", "16GiB", "--budget", "24GiB")
    head, rows = table()
    assert head[1] == "as given: GQA, 8 kv heads", head
    # 32 layers x 8 kv heads x 128 x 2 (K and V) x 2 bytes (f16) = 128 KiB per token; 4096 tokens = 512 MiB.
    assert rows["per token"][0].text == "128.00 KiB" and rows["4,096 tokens"][0].text == "512.00 MiB"
    assert rows["131,072 tokens"][0].get_attribute("title") == f"{cli['layouts'][0]['totals'][2]['bytes']:,} bytes"
    assert [c.text for c in rows["crossover"]] == [tokens(l["crossover_tokens"]) for l in cli["layouts"]]
    assert [c.text for c in rows["fits budget"]] == [tokens(l["max_tokens"]) for l in cli["layouts"]]
    assert d.find_element(*by("#plan-error")).text == ""
    screenshot(d, "serve-planner.png")

    # A wrong value is explained, not a blank table.
    fill(kv="5")
    waiter(d, 30).until(lambda d: "divisible" in d.find_element(*by("#plan-error")).text)
    # Back to the model: its shape and its weights.
    d.find_element(*by("#p-model")).click()
    waiter(d, 30).until(lambda d: table()[0][1:2] == ["this model: GQA, 3 kv heads"])
    assert "the loaded model's tensors" in d.find_element(*by("#plan-summary")).text


def test_tool_calls_show_as_blocks_and_the_json_schema_setting_is_sent(start_server, browser):
    qwen = tally_home() / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    need(qwen.exists(), f"qwen2.5-coder:0.5b is not installed at {qwen} (tally pull qwen2.5-coder:0.5b)")
    srv = start_server("-m", str(qwen), "--parallel", "1", "-c", "2048", "--max-tokens", "128")
    d = browser
    open_page(d, srv.url)
    d.execute_script(SPY)
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    question = "What is the weather like in Paris right now?"
    set_settings(d, tools=json.dumps([tool]), temperature=0, max_tokens=64)
    reply = send(d, question)
    body = d.execute_script("return window.__bodies")[-1]
    assert body["tools"] == [tool]
    # The API's answer to the same request: a call, shown as a block with the name and the arguments.
    status, _, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": question}],
                                                       "tools": [tool], "temperature": 0, "max_tokens": 64})
    assert status == 200, out
    call = json.loads(out)["choices"][0]["message"]["tool_calls"][0]["function"]
    blocks = reply.find_elements(*by(".tool-call"))
    assert len(blocks) == 1
    assert blocks[0].find_element(*by(".tool-name code")).text == call["name"] == "get_weather"
    assert blocks[0].find_element(*by("pre")).text == json.dumps(json.loads(call["arguments"]), indent=2)
    assert '"arguments"' not in reply.text and "<tool_call>" not in reply.text
    assert reply.find_element(*by(".stats")).text.endswith("tool_calls")
    # Kept with the conversation: the next turn sends the call back as tool_calls.
    _, convs = stored(d)
    assert [m.get("tool_calls", [{}])[0].get("function", {}).get("name") for m in next(iter(convs.values()))["messages"]
            if m["role"] == "assistant"] == ["get_weather"]

    # The JSON schema setting: not JSON is named beside the field and nothing is sent.
    d.execute_script(SPY)
    set_settings(d, tools="", json_schema="{\"type\": ")
    assert "not valid JSON" in d.find_element(*by("#s-json_schema-error")).get_attribute("textContent")
    d.find_element(*by("#input")).send_keys("Hello")
    d.find_element(*by("#send")).click()
    assert "not valid JSON" in d.find_element(*by("#s-json_schema-error")).text
    assert d.execute_script("return window.__bodies") == []
    assert d.find_element(*by("#input")).get_attribute("value") == "Hello"  # kept for the next try
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    set_settings(d, json_schema=json.dumps(schema))
    assert d.find_element(*by("#s-json_schema-error")).get_attribute("textContent") == ""
    d.find_element(*by("#send")).click()
    # (the spy was put in twice, so each request is there twice)
    waiter(d).until(lambda d: d.execute_script("return window.__bodies.length") >= 1 and
                    d.find_element(*by("#send")).is_enabled())
    body = d.execute_script("return window.__bodies")[0]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "page", "schema": schema, "strict": True}}
    assert "tools" not in body
