"""report.html: content checks in Python, and the page in a real headless Chromium."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.demo import nan_posenc

EVIL = "<script>alert(1)</script>"
CHARTS = [
    "chart-loss",
    "chart-grad-norm",
    "chart-grad-flow",
    "chart-grad-heatmap",
    "chart-activations",
    "chart-update-ratio",
]


class Evil(nn.Module):
    """A model with a module named like markup, a NaN at step 30 and a sigmoid layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.add_module(EVIL, nn.Linear(16, 16))
        self.gate = nn.Sigmoid()
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc(x))
        h = self.gate(getattr(self, EVIL)(h))
        present = (x[:, :1] != 0).to(x.dtype)  # 0 for a row whose first feature is 0
        return self.head(h) / present


@pytest.fixture(scope="module")
def evil_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "evil"
    torch.manual_seed(0)
    model = Evil()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with gradoc.watch(model, opt, out=out, guard=True, activations=5, params=5) as run:
        for step in range(60):
            x = torch.randn(32, 8)
            if step == 30:
                x[0] = 0.0
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run.dir


def test_report_html_is_written_self_contained_and_escaped(evil_run: Path) -> None:
    page = (evil_run / "report.html").read_text()
    assert "<script" not in page.replace("&lt;script", "")  # no markup from the names
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for fetch in ('src="http', "src='http", 'href="http', "href='http", "url(http", "@import"):
        assert fetch not in page  # nothing to fetch: no CDN, works offline
    for fid in CHARTS:
        assert f"id='{fid}'" in page
    assert page.count("<svg") >= len(CHARTS) + 1  # every chart drawn, dead and saturated too
    assert "Where it was born" in page and "aten.div.Tensor" in page
    assert "return self.head(h) / present" in page  # the origin line, with its context


def test_report_command_writes_html(evil_run: Path, tmp_path: Path) -> None:
    from tests.test_cli import gradoc_cli

    target = tmp_path / "again.html"
    done = gradoc_cli("report", str(evil_run), "--html", str(target))
    assert done.returncode == 0, done.stderr
    assert "gradoc ·" in target.read_text()


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser() -> object:
    found = _chromium()
    if found is None:
        if os.environ.get("GRADOC_REQUIRE_BROWSER"):
            pytest.fail("Chromium and chromedriver are required here (GRADOC_REQUIRE_BROWSER)")
        pytest.skip(
            "Chromium/chromedriver not installed (apt-get install chromium chromium-driver)"
        )
    selenium = pytest.importorskip("selenium.webdriver")
    options = selenium.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = selenium.ChromeService(executable_path=found[1])
    driver = selenium.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def _load(driver: object, page: Path) -> list[dict[str, object]]:
    driver.get(page.resolve().as_uri())  # type: ignore[attr-defined]
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]


def test_report_in_chromium_loads_clean_and_every_chart_is_visible(
    browser: object, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    out = tmp_path / "demo"
    nan_posenc.run(out, epochs=1, n_train=1600)
    errors = _load(browser, out / "report.html")
    assert errors == []
    driver = browser
    finding = driver.find_element(By.CSS_SELECTOR, "#diagnosis .finding.error")  # type: ignore[attr-defined]
    assert finding.is_displayed() and "pos_encoding" in finding.text
    hit = driver.find_element(By.CSS_SELECTOR, "#diagnosis pre.src .hit")  # type: ignore[attr-defined]
    assert "rel = pos / span" in hit.text
    for fid in CHARTS:
        chart = driver.find_element(By.ID, fid)  # type: ignore[attr-defined]
        svg = chart.find_element(By.TAG_NAME, "svg")
        assert chart.is_displayed() and svg.is_displayed(), fid
        assert svg.size["height"] > 100 and svg.size["width"] > 400, (fid, svg.size)
    driver.set_window_size(1280, int(driver.execute_script("return document.body.scrollHeight")))  # type: ignore[attr-defined]
    driver.save_screenshot(str(tmp_path / "report.png"))  # type: ignore[attr-defined]
    assert (tmp_path / "report.png").stat().st_size > 50_000


def test_escaped_module_name_is_inert_in_chromium(browser: object, evil_run: Path) -> None:
    errors = _load(browser, evil_run / "report.html")
    assert errors == []
    driver = browser
    # no alert opened (selenium would raise on the next command), no script element exists,
    # and the name is on the page as text
    assert driver.execute_script("return document.scripts.length") == 0  # type: ignore[attr-defined]
    assert EVIL in driver.execute_script("return document.body.innerText")  # type: ignore[attr-defined]
    assert EVIL in driver.execute_script(  # type: ignore[attr-defined]
        "return Array.from(document.querySelectorAll('svg text')).map(t => t.textContent).join(' ')"
    )
