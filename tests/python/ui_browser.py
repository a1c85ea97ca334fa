"""The approval page in real headless Chromium (Debian's chromium + chromium-driver, driven
with python3-selenium), against a running switchboard.

Usage: ui_browser.py INGEST LINK SCREENSHOT; the ingest bearer token in SWITCHBOARD_TOKEN
(used only to post messages, as a webhook would; it never goes into a URL).

Checks, in order: the one-time link opens the page; a confirm posted after the page opened
appears without a reload; a screenshot at phone width; Approve answers it and it leaves the
list; a cross-site page (another origin, and another site) cannot answer a confirm with the
browser's cookie; a burst of confirms all appear; the link works once; without the cookie /ui and its data show nothing.
Prints one line per check passed; exits non-zero with a sentence on the first failure.
"""

import http.server
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

INGEST, LINK, SCREENSHOT = sys.argv[1:4]
TOKEN = os.environ["SWITCHBOARD_TOKEN"]
BASE = f"http://{INGEST}"


def post_message(channel, content):
    body = json.dumps({"server": "alertmanager", "channel": channel, "content": content}).encode()
    req = urllib.request.Request(
        f"{BASE}/v1/messages",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    # Straight to the loopback listener, whatever proxy the environment names.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as r:
            assert r.status == 202, r.status
    except urllib.error.HTTPError as e:
        raise AssertionError(f"POST /v1/messages: {e.code} {e.read().decode()}") from e


STARTED = time.monotonic()


def check(what):
    print(f"ok: {what} ({time.monotonic() - STARTED:.1f}s)", flush=True)


def evil_server(confirm_id):
    """A page on another origin that tries to answer confirm `confirm_id` with the browser's
    cookie: a JSON fetch with credentials and a plain form post."""
    page = f"""<!doctype html><title>evil</title>
<form id=f method=POST action="{BASE}/ui/api/confirm" enctype="text/plain">
<input name='{{"id": {confirm_id}, "decision": "approve", "x": "' value='"}}'></form>
<script>
fetch("{BASE}/ui/api/confirm", {{method: "POST", credentials: "include", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}},
  body: JSON.stringify({{id: {confirm_id}, decision: "approve"}})}})
  .finally(() => {{ document.title = "fetched"; document.getElementById("f").submit(); }});
</script>"""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page.encode())

        def log_message(self, *args):
            pass

    # Threads: a connection the browser opens ahead and leaves idle must not hold the rest.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    options = Options()
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--hide-scrollbars", "--no-proxy-server"]:
        options.add_argument(arg)
    options.add_experimental_option(
        "mobileEmulation", {"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2}}
    )
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)
    try:
        driver.get(LINK)
        wait.until(lambda d: d.current_url == f"{BASE}/ui")
        wait.until(lambda d: d.find_element(By.ID, "status").text == "live")
        assert driver.find_element(By.ID, "pending-empty").is_displayed()
        check("the one-time link opens the page, live")

        driver.execute_script("window.notReloaded = true")
        post_message("alerts/disk", "[FIRING] DiskFull: /var is at 97% on db-1")
        card = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".confirm[data-id]"))[0]
        assert driver.execute_script("return window.notReloaded === true"), "the page reloaded"
        text = card.text.lower()
        for part in ["ask", "alerts/disk", "diskfull", "investigate: [firing]", "view", "left",
                     "untrusted"]:
            assert part in text, f"{part!r} not in the card: {text!r}"
        wait.until(lambda d: "left" in card.find_element(By.CLASS_NAME, "left").text)
        check("a confirm posted after the page opened appears without a reload")

        width = driver.execute_script("return document.documentElement.clientWidth")
        scroll = driver.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= width, f"wider than the phone: {scroll} > {width}"
        driver.save_screenshot(SCREENSHOT)
        check(f"screenshot at phone width ({width} px) in {SCREENSHOT}")

        confirm_id = card.get_attribute("data-id")
        card.find_element(By.CLASS_NAME, "approve").click()
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, ".confirm[data-id]"))
        wait.until(lambda d: f'#{confirm_id} [ask] approved via web by page link "phone"'
                   in d.find_element(By.ID, "closed").text)
        check("Approve answers it, via web by the link's label, and it leaves the list")

        # Another confirm; a page on another origin (same site: 127.0.0.1) and on another
        # site (localhost) tries to approve it with this browser's cookie.
        post_message("alerts/disk", "[FIRING] DiskFull: /home is at 99% on db-2")
        second = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".confirm[data-id]"))[0]
        second_id = second.get_attribute("data-id")
        evil = evil_server(second_id)
        port = evil.server_address[1]
        for origin in [f"http://127.0.0.1:{port}/", f"http://localhost:{port}/"]:
            driver.get(origin)
            wait.until(lambda d: d.title == "fetched" or "ui/api/confirm" in d.current_url)
            # The form post lands on the endpoint: its refusal is what the browser shows.
            wait.until(lambda d: "ui/api/confirm" in d.current_url)
            body = driver.find_element(By.TAG_NAME, "body").text
            assert "approved" not in body, body
            check(f"refused from {origin}: {body}")
        evil.shutdown()
        driver.get(f"{BASE}/ui")
        wait.until(lambda d: d.find_element(By.ID, "status").text == "live")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'.confirm[data-id="{second_id}"]'))
        check("a cross-site POST (another origin, another site) is refused: still pending")

        # A burst on a slow host: the page's state fetches take 400 ms more (as under load),
        # so the events of eight confirms arrive while it is fetching the state for the first
        # ones, read before they were shown. Each still gets its card, without a reload.
        driver.execute_script("""
            const real = window.fetch;
            window.fetch = async (...args) => {
              const r = await real(...args);
              if (String(args[0]).includes("/ui/api/state")) {
                await new Promise((done) => setTimeout(done, 400));
              }
              return r;
            };""")
        burst = [threading.Thread(target=post_message,
                                  args=("alerts/cpu", f"[FIRING] CpuHigh on web-{i}"))
                 for i in range(8)]
        for t in burst:
            t.start()
        for t in burst:
            t.join()
        try:
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".confirm[data-id]")) == 9)
        except Exception:
            shown = len(driver.find_elements(By.CSS_SELECTOR, ".confirm[data-id]"))
            raise AssertionError(f"{shown} of 9 confirm cards shown 20 s after a burst of 8")
        check("a burst of 8 confirms: every card appears")

        driver.delete_all_cookies()
        driver.get(LINK)
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "used already or has expired" in body, body
        check("the link works once")

        for path in ["/ui", "/ui/api/state", "/ui/api/events"]:
            driver.get(f"{BASE}{path}")
            body = driver.find_element(By.TAG_NAME, "body").text
            assert "DiskFull" not in body and "db-2" not in body, f"{path}: {body}"
            assert "session" in body, f"{path}: {body}"
        check("without the cookie, /ui and its data endpoints show nothing")
    finally:
        driver.quit()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
