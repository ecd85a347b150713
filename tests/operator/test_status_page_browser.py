"""The status page in a real browser: Debian's chromium, driven by selenium (both installed by .ci/run).

A person opens the page, signs in with the control token, and approves a proposal, drains a broker and pauses
the operator with the page's own forms (each carrying its CSRF value). Without the control token the page shows
no control and a hand-made form changes nothing; and a page of another origin — served by a second server on
loopback, whose forms post to the status page while the person is signed in there — changes nothing either.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.builders import free_port
from tests.operator.test_workflows import CONTROL_TOKEN, control_token_file, running, sent_unloads
from tests.operator.test_workflows import sim as sim

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed")


@pytest.fixture
def browser():
    """Chromium with a temporary directory of its own, removed after it quits: it leaves its profile's singleton
    socket in a directory under $TMPDIR that outlives it."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    own = tempfile.mkdtemp(prefix="chromium-")  # short: a unix socket's path is at most 107 bytes
    service = webdriver.ChromeService(executable_path=DRIVER, env={**os.environ, "TMPDIR": own})
    try:
        driver = webdriver.Chrome(options=options, service=service)
        driver.set_page_load_timeout(20)
        yield driver
        driver.quit()
    finally:
        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture
def page(sim, tmp_path, request):
    """The daemon (manual approval unless the test says otherwise, a control token) and its page on a free
    loopback port."""
    port = free_port()
    settings = {"approval": "manual", "metricsPort": port, "metricsHost": "127.0.0.1", **getattr(request, "param", {})}
    with running(sim, tmp_path, controlTokenFile=control_token_file(tmp_path), **settings) as daemon:
        server = daemon._start_probe_server()
        try:
            daemon.base = f"http://127.0.0.1:{port}"
            yield daemon
        finally:
            server.shutdown()
            server.server_close()


def _wait(browser, condition):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page reloads (chromium may answer a query on the old page's node with a generic error meanwhile)
    WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(condition)


def _sign_in(browser, base):
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/")
    browser.find_element(By.NAME, "token").send_keys(CONTROL_TOKEN)
    browser.find_element(By.XPATH, "//button[text()='Sign in']").click()
    _wait(browser, lambda driver: "signed in to control" in driver.find_element(By.ID, "access").text)


def test_a_person_approves_a_proposal_in_the_browser(page, sim, browser):
    from selenium.webdriver.common.by import By

    result = page.run_once()
    browser.get(f"{page.base}/")
    assert "pulsar-lb-operator" in browser.title
    rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tr")
    assert len(rows) == 1 + len(sim.cluster.active_ids())  # the header and one row per broker
    row_xpath = f"//table[@id='proposals']//tr[td[1]='{result.cycle_id}']"
    assert "pending" in browser.find_element(By.XPATH, row_xpath).text
    assert not browser.find_elements(By.XPATH, "//button[text()='Approve']")  # not signed in: no controls
    _sign_in(browser, page.base)
    browser.find_element(By.XPATH, row_xpath).find_element(By.XPATH, ".//button[text()='Approve']").click()
    _wait(browser, lambda driver: "approved" in driver.find_element(By.XPATH, row_xpath).text)
    assert browser.current_url.rstrip("/") == page.base  # redirected back to the page
    assert page.control.read().proposals[result.cycle_id]["status"] == "approved"
    page.approvals_due()
    assert sent_unloads(sim)  # executed behind the rails


@pytest.mark.parametrize("page", [{"approval": "auto"}], indirect=True)
def test_with_the_control_token_the_forms_drain_and_pause(page, sim, browser):
    from selenium.webdriver.common.by import By

    page.run_once()
    busy = sim.cluster.by_name("broker-0").id
    _sign_in(browser, page.base)
    browser.find_element(By.NAME, "broker").send_keys(busy)
    browser.find_element(By.XPATH, "//button[text()='Drain']").click()
    _wait(browser, lambda driver: busy in driver.find_element(By.ID, "drains").text)
    assert page.control.read().drains[busy]["by"] == "status page (127.0.0.1)"
    browser.find_element(By.NAME, "reason").send_keys("incident 4211")
    browser.find_element(By.XPATH, "//button[text()='Pause']").click()
    _wait(browser, lambda driver: "ON: nothing is sent" in driver.find_element(By.ID, "kill-switch").text)
    assert "incident 4211" in browser.find_element(By.ID, "kill-switch").text
    before = len(sim.requests)
    result = page.run_once()  # the drain is planned, and nothing is sent
    assert result.records and sent_unloads(sim, before) == []
    assert {r.detail for r in result.records} == {
        f"kill switch: paused by status page (127.0.0.1): incident 4211; file {page.settings.kill_switch_file()} exists"
    }
    browser.find_element(By.XPATH, "//button[text()='Resume']").click()
    _wait(browser, lambda driver: "off" in driver.find_element(By.ID, "kill-switch").text)


def _post_form(browser, action, fields):
    """Build a form in the page the browser shows, and submit it as a person would."""
    browser.execute_script(
        "const form = document.createElement('form'); form.method = 'post'; form.action = arguments[0];"
        "for (const [name, value] of Object.entries(arguments[1])) {"
        "  const input = document.createElement('input'); input.name = name; input.value = value;"
        "  form.appendChild(input); }"
        "document.body.appendChild(form); form.submit();",
        action,
        fields,
    )


def test_without_the_control_token_the_page_changes_nothing(page, sim, browser):
    from selenium.webdriver.common.by import By

    page.run_once()
    busy = sim.cluster.by_name("broker-0").id
    browser.get(f"{page.base}/")
    assert not browser.find_elements(By.XPATH, "//button[text()='Drain' or text()='Pause' or text()='Approve']")
    _post_form(browser, f"{page.base}/drains", {"broker": busy, "csrf": "0" * 32})  # hand-made, same origin
    _wait(browser, lambda driver: "control token is required" in driver.find_element(By.TAG_NAME, "body").text)
    _post_form(browser, f"{page.base}/pause", {"reason": "not mine to pause"})
    _wait(browser, lambda driver: "control token is required" in driver.find_element(By.TAG_NAME, "body").text)
    assert page.control.read().drains == {} and page.executor.safety.kill_switch() is None


class _OtherOrigin(ThreadingHTTPServer):
    """A second server on loopback, another port (so another origin, though the same site for cookies): its
    page's forms post to the status page."""

    def __init__(self, html: str) -> None:
        page = html.encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

        super().__init__(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.serve_forever, args=(0.1,), daemon=True).start()

    def __enter__(self) -> _OtherOrigin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


def test_a_page_of_another_origin_changes_nothing_even_while_signed_in(page, sim, browser):
    from selenium.webdriver.common.by import By

    page.run_once()
    busy = sim.cluster.by_name("broker-0").id
    _sign_in(browser, page.base)
    csrf = browser.find_element(By.NAME, "csrf").get_attribute("value")  # even a leaked CSRF value: Origin is checked
    forms = "".join(
        f'<form method="post" action="{page.base}{action}" id="f{i}"><input name="csrf" value="{value}">'
        f'<input name="broker" value="{busy}"><input name="reason" value="x"><button>go{i}</button></form>'
        for i, (action, value) in enumerate([("/drains", csrf), ("/pause", csrf), ("/drains", "")])
    )
    with _OtherOrigin(f"<!doctype html><title>elsewhere</title>{forms}") as other:
        for i in range(3):
            browser.get(f"http://127.0.0.1:{other.server_port}/")
            browser.find_element(By.XPATH, f"//button[text()='go{i}']").click()
            _wait(browser, lambda driver: driver.current_url.startswith(page.base))
            assert browser.find_element(By.TAG_NAME, "body").text == "cross-origin request refused"
    assert page.control.read().drains == {} and page.executor.safety.kill_switch() is None


def test_a_page_of_another_origin_cannot_frame_the_page_under_a_click_of_its_own(page, sim, browser):
    """Clickjacking: a page of another origin frames the status page, made invisible over a decoy of its own, so a
    signed-in person's click on the decoy lands on Pause. The page forbids framing (``X-Frame-Options``, CSP
    ``frame-ancestors``): the browser shows no status page in the frame, and the click pauses nothing."""
    from selenium.webdriver.common.by import By

    page.run_once()
    _sign_in(browser, page.base)
    assert browser.find_elements(By.XPATH, "//button[text()='Pause']")  # signed in, the page offers Pause
    framing = f'<!doctype html><title>a prize</title><iframe id="f" src="{page.base}/" width="900" height="900">'
    with _OtherOrigin(framing) as other:
        browser.get(f"http://127.0.0.1:{other.server_port}/")
        browser.switch_to.frame(browser.find_element(By.ID, "f"))
        assert not browser.find_elements(By.XPATH, "//button[text()='Pause']")
        assert not browser.find_elements(By.ID, "kill-switch")
        browser.switch_to.default_content()
    assert page.executor.safety.kill_switch() is None
