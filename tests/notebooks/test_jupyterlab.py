"""A real browser: JupyterLab on 127.0.0.1, headless Chromium driven by Playwright, the LayerNorm case
notebook run top to bottom, the turn inspector played to its last turn, a screenshot taken. The test
writes nothing into the repository: the notebook's figure and the screenshot go to the test's folder."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOK = "04_layernorm_case.ipynb"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accept_dialogs(page, seen: list[str]) -> int:
    """Answer whatever dialog JupyterLab shows (which kernel to start, a restart prompt) as a user would,
    noting its text: an open dialog takes every click meant for the menus. Returns how many it answered."""
    dialog, answered = page.locator(".jp-Dialog"), len(seen)
    while dialog.count():
        seen.append(" ".join(dialog.first.inner_text().split())[:200])
        button = page.locator(".jp-Dialog .jp-mod-accept")
        (button.first if button.count() else page.locator(".jp-Dialog button").first).click(timeout=10_000)
        page.wait_for_timeout(500)
    return len(seen) - answered


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab serving a copy of notebooks/, so that autosave never touches the committed files."""
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    copy = tmp_path / "notebooks" / NOTEBOOK  # its figure to this folder, not the committed figures/
    copy.write_text(copy.read_text().replace('figure_name = \\"layernorm_case\\"',
                                             f'figure_name = \\"{tmp_path / "layernorm_case"}\\"', 1))
    assert str(tmp_path / "layernorm_case") in copy.read_text()
    port, token = free_port(), "drk-test-token"
    # start the notebook's kernel without asking: a cold kernel start otherwise brings up a "Select Kernel"
    # dialog, and a run-all clicked meanwhile is lost
    settings = tmp_path / "config/lab/user-settings/@jupyterlab/notebook-extension/tracker.jupyterlab-settings"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"autoStartDefaultKernel": true}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "run")}
    with open(tmp_path / "jupyterlab.log", "wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--ServerApp.token={token}", f"--ServerApp.root_dir={tmp_path}", "--allow-root",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            env=env, stdout=log_file, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not start; {log_tail(tmp_path)}")
        yield url, token, tmp_path
    finally:
        server.terminate()
        server.wait(timeout=20)


def click_menu(page, menu: str, command: str) -> None:
    page.get_by_role("menuitem", name=menu).click()
    page.locator(f"li[data-command='{command}']").click()


def log_tail(folder: Path) -> str:
    return "JupyterLab's log ends:\n" + (folder / "jupyterlab.log").read_text()[-2000:]


# above the loop's own 300 s, so that a stuck run ends in its diagnosis (dialogs, prompts, the server's
# log) rather than in pytest-timeout's thread dump, and the reload-and-restart path has time to work
@pytest.mark.timeout(600)
def test_the_case_notebook_runs_and_the_inspector_plays_to_turn_3(jupyterlab):
    sync_api = pytest.importorskip("playwright.sync_api")
    url, token, folder = jupyterlab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/notebooks/{NOTEBOOK}?token={token}")
        page.wait_for_selector(".jp-Notebook", timeout=60_000)
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        turn = page.locator(".drk-turn")
        # a dropped kernel connection leaves the page without its widget models: every later run shows this
        # until the page is reloaded
        lost_widgets = page.locator(".jp-OutputArea-output", has_text="Error displaying widget")
        dialogs: list[str] = []
        deadline, last_run = time.monotonic() + 300, -1e9
        while not turn.count():
            if accept_dialogs(page, dialogs):  # a run-all clicked behind a dialog is lost: click it again
                last_run = -1e9
            waited = time.monotonic() - last_run
            ran = last_run > 0  # a run-all since the last reload, whose outputs are on the page
            if idle.count() and waited > 30 and not (ran and lost_widgets.count()):  # no inspector: run all (again)
                click_menu(page, "Run", "runmenu:run-all")
                last_run = time.monotonic()
            elif (idle.count() and waited > 30) or 90 < waited < 1e8:
                # our run's widgets could not be shown, or still busy 90 s after a run-all (it takes about 10 s):
                # a stuck kernel or a stale connection to it; a user reloads the page and restarts the kernel
                page.reload()
                page.wait_for_selector(".jp-Notebook", timeout=60_000)
                click_menu(page, "Kernel", "kernelmenu:restart")  # the next pass answers its confirmation
                last_run = -1e9
            if time.monotonic() > deadline:
                prompts = page.locator(".jp-InputPrompt").all_inner_texts()
                outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
                pytest.fail(f"the notebook never showed the inspector (dialogs: {dialogs}; prompts: {prompts}; "
                            f"outputs: {[o[:300] for o in outputs]}); {log_tail(folder)}")
            page.wait_for_timeout(1000)
        page.locator(".widget-play button").first.click()  # the inspector's play button
        page.wait_for_function("() => [...document.querySelectorAll('.drk-turn')]"
                               ".some(e => e.textContent.includes('turn 3 of 3'))", timeout=60_000)
        # in the page, not through a held handle: the inspector redraws its turn box as it plays
        page.evaluate("() => document.querySelector('.drk-turn').scrollIntoView({block: 'center'})")
        no_news = page.get_by_role("button", name="No")  # JupyterLab's "get notified about news?" toast
        if no_news.count():
            no_news.first.click()
        page.screenshot(path=str(folder / "layernorm_inspector.png"))
        browser.close()
    assert (folder / "layernorm_inspector.png").stat().st_size > 10_000
    assert (folder / "layernorm_case.html").exists()  # the notebook's figure, where the parameter sent it
