"""The web page (GET /) in headless Chromium, driven by selenium through
Debian's chromedriver (never selenium's own driver manager, which would
download one): load the page, send a message, watch the reply stream in,
use the KV planner. With TALLY_SCREENSHOTS=DIR, screenshots of the chat and
the planner go to DIR/serve-chat.png and DIR/serve-planner.png."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest

from conftest import ROOT, find_program, need

CHROMIUM_DIRS = ("/usr/bin", "/usr/lib/chromium")


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
              "--disable-extensions", "--disable-background-networking", "--disable-sync"):
        opts.add_argument(a)
    profile = tempfile.TemporaryDirectory(prefix="tally-chromium-")
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


def test_chat_streams_and_planner_plans(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 120, poll_frequency=0.05)
    d.get(server.url + "/")
    assert d.title == "tally"
    wait.until(lambda d: "context" in d.find_element(By.ID, "model").text)

    # Record every change of the reply's text as it happens (a streamed reply changes many times).
    d.execute_script("""
      window.__lengths = [];
      new MutationObserver(() => {
        const a = document.querySelectorAll('#log .assistant span');
        if (a.length) window.__lengths.push(a[a.length - 1].textContent.length);
      }).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
    """)
    d.find_element(By.ID, "temperature").clear()
    d.find_element(By.ID, "temperature").send_keys("0")
    d.find_element(By.ID, "max_tokens").clear()
    d.find_element(By.ID, "max_tokens").send_keys("64")
    box = d.find_element(By.ID, "input")
    box.send_keys("What is a KV cache in a language model?")
    d.find_element(By.ID, "send").click()
    wait.until(lambda d: not d.find_element(By.ID, "stop").get_attribute("disabled"))  # streaming
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#log .assistant .stats").text)  # finished
    reply = d.find_element(By.CSS_SELECTOR, "#log .assistant span").text
    stats = d.find_element(By.CSS_SELECTOR, "#log .assistant .stats").text
    lengths = d.execute_script("return window.__lengths")
    assert d.find_element(By.CSS_SELECTOR, "#log .user").text == "What is a KV cache in a language model?"
    assert reply, "no reply text"
    assert len({n for n in lengths if n > 0}) >= 5, f"the reply did not arrive in pieces: {lengths}"
    assert sorted(lengths) == lengths, "the streamed text shrank"
    assert "tokens/s" in stats and "cached" in stats and "first token" in stats, stats
    assert d.find_element(By.ID, "chat-error").text == ""
    assert d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled()
    # The page's text is the server's greedy answer to the same request.
    status, _, out = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is a KV cache in a language model?"}],
        "temperature": 0, "max_tokens": 64})
    assert json.loads(out)["choices"][0]["message"]["content"].strip() == reply.strip()

    # A second turn: its prompt holds the first turn, which the prefix cache has.
    box.send_keys("Say it in one sentence.")
    d.find_element(By.ID, "send").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .assistant .stats")) == 2 and
               d.find_elements(By.CSS_SELECTOR, "#log .assistant .stats")[1].text)
    stats2 = d.find_elements(By.CSS_SELECTOR, "#log .assistant .stats")[1].text
    cached = int(stats2.split(" cached")[0].rsplit(", ", 1)[1])
    assert cached > 0, stats2
    screenshot(d, "serve-chat.png")

    # The planner: the loaded model's shape first, then a layout of our own.
    d.find_element(By.ID, "tab-plan").click()
    assert d.find_element(By.ID, "plan").is_displayed() and not d.find_element(By.ID, "chat").is_displayed()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#plan-table tr")) > 1)
    assert "this model" in d.find_element(By.ID, "plan-table").text
    for field, value in (("p-layers", "32"), ("p-heads", "32"), ("p-kv", "8"), ("p-hd", "128"),
                         ("p-tokens", "4096,32768,131072")):
        el = d.find_element(By.ID, field)
        el.clear()
        el.send_keys(value)
    d.find_element(By.CSS_SELECTOR, "#plan-form button[type=submit]").click()
    wait.until(lambda d: "131,072 tokens" in d.find_element(By.ID, "plan-table").text)
    rows = [[c.text for c in r.find_elements(By.CSS_SELECTOR, "td")]
            for r in d.find_elements(By.CSS_SELECTOR, "#plan-table tr")[1:]]
    model_row = rows[0]
    assert model_row[0] == "as given (GQA)", model_row
    # 32 layers x 8 kv heads x 128 x 2 (K and V) x 2 bytes (f16) = 128 KiB per token; 4096 tokens = 512 MiB.
    assert model_row[1] == "8" and model_row[2] == "128.00 KiB" and model_row[3] == "512.00 MiB", model_row
    assert d.find_element(By.ID, "plan-error").text == ""
    screenshot(d, "serve-planner.png")
    # A wrong value is explained, not a blank table.
    el = d.find_element(By.ID, "p-kv")
    el.clear()
    el.send_keys("5")
    d.find_element(By.CSS_SELECTOR, "#plan-form button[type=submit]").click()
    wait.until(lambda d: d.find_element(By.ID, "plan-error").text)
