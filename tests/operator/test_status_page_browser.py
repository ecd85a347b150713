"""The status page in a real browser: Debian's chromium, driven by selenium (both installed by .ci/run).

A person opens the page, sees every broker and the proposal, clicks "Approve", lands back on the page
with the proposal approved, and the daemon executes it.
"""

from __future__ import annotations

import shutil

import pytest

from pulsar_lb_operator.store.control import ControlFile
from tests.builders import free_port
from tests.operator.test_workflows import make, sent_unloads
from tests.operator.test_workflows import sim as sim

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed")


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def test_a_person_approves_a_proposal_in_the_browser(sim, tmp_path, browser):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    daemon = make(sim, tmp_path, approval="manual", metricsPort=port, metricsHost="127.0.0.1")
    server = daemon._start_probe_server()
    try:
        result = daemon.run_once()
        browser.get(f"http://127.0.0.1:{port}/")
        assert "pulsar-lb-operator" in browser.title
        rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tr")
        assert len(rows) == 1 + len(sim.cluster.active_ids())  # the header and one row per broker
        row_xpath = f"//table[@id='proposals']//tr[td[1]='{result.cycle_id}']"
        proposal_row = browser.find_element(By.XPATH, row_xpath)
        assert "pending" in proposal_row.text
        proposal_row.find_element(By.XPATH, ".//button[text()='Approve']").click()
        # the page reloads (chromium may answer a query on the old page's node with a generic error meanwhile)
        WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(
            lambda driver: "approved" in driver.find_element(By.XPATH, row_xpath).text
        )
        assert browser.current_url.rstrip("/") == f"http://127.0.0.1:{port}"  # redirected back to the page
        assert ControlFile(tmp_path / "state.json").read().proposals[result.cycle_id]["status"] == "approved"
        daemon.approvals_due()
        assert sent_unloads(sim)  # executed behind the rails
    finally:
        server.shutdown()
        server.server_close()
