"""The HTML reports opened in a real browser (headless Chromium), offline, as an operator would open one.

Two looks at each page: the DOM after layout -- a copy of the page with a probe
script appended reports the size and place of every table and drawing -- and a
screenshot of the page itself (its own Content-Security-Policy intact), whose
pixels are checked where the probe found the tables and the plots: ink there,
the plot's line colour inside the plot, the leak's red inside the matrix.
Not a unit test (it needs Chromium, which .ci/setup-host installs), so it fails
when Chromium is missing rather than skipping: a green run means it ran.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from appliance.isolation import html as iso_html
from appliance.isolation import report as iso_report
from appliance.netperf.figures import compare
from appliance.netperf.report import html as np_html
from appliance.netperf.store import results

DATA = Path(__file__).resolve().parent.parent / "unit" / "data"
WIDTH, HEIGHT = 1200, 3000  # tall enough for the first plot below a run's metadata and first table
PLOT_BLUE = (0x1F, 0x77, 0xB4)  # matplotlib's first line colour
LEAK_RED = (0xFB, 0xD9, 0xD6)  # the page's .bad cell background
PROBE = """<script>
const box = e => { const r = e.getBoundingClientRect();
  return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height, cls: e.getAttribute('class') || ''}; };
document.body.insertAdjacentHTML('beforeend', '<pre id="probe"></pre>');
document.getElementById('probe').textContent = JSON.stringify({
  tables: [...document.querySelectorAll('table')].map(box),
  svgs: [...document.querySelectorAll('svg')].map(box),
  svgTexts: [...document.querySelectorAll('svg text')].filter(t => t.getBBox().width > 0).length,
  height: document.documentElement.scrollHeight});
</script>"""


def chromium() -> str:
    for name in (
        "chromium-headless-shell",
        "chromium",
        "chromium-browser",
        "/usr/lib64/chromium-browser/headless_shell",
    ):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no headless Chromium: run .ci/setup-host (Debian package chromium-headless-shell)")


def browse(page: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--force-device-scale-factor=1", f"--user-data-dir={tmp / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
            *args, page.as_uri()]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def layout(html: str, tmp: Path) -> dict:
    """Where the browser laid out every table and drawing (a probing copy of the page; CSP relaxed for it)."""
    probing = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace(
        "</body>", PROBE + "</body>"
    )
    path = tmp / "probe.html"
    path.write_text(probing)
    dom = browse(path, "--dump-dom", tmp=tmp).stdout
    found = re.search(r'<pre id="probe">(\{.*?)</pre>', dom, re.S)  # (not the script's own text)
    assert found, "the probe did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def screenshot(html: str, tmp: Path) -> Image.Image:
    path = tmp / "report.html"
    path.write_text(html)
    shot = tmp / "shot.png"
    browse(path, f"--screenshot={shot}", tmp=tmp)
    img = Image.open(shot).convert("RGB")
    assert img.size == (WIDTH, HEIGHT)
    return img


def region(img: Image.Image, box: dict) -> Image.Image:
    x, y = int(box["x"]), int(box["y"])
    assert y + 10 < HEIGHT, f"{box} is below the first screen"
    return img.crop((x, y, min(WIDTH, x + int(box["w"])), min(HEIGHT, y + int(box["h"]))))


def ink(img: Image.Image) -> float:
    """Share of pixels that are not the white page."""
    px = list(img.getdata())
    return sum(1 for p in px if sum(p) < 720) / max(1, len(px))


def near(img: Image.Image, colour: tuple[int, int, int], tol: int = 40) -> int:
    return sum(1 for p in img.getdata() if all(abs(a - b) <= tol for a, b in zip(p, colour)))


def test_a_run_report_renders_its_tables_and_plots(tmp_path) -> None:
    html = np_html.suite_page(results.load(DATA / "netperf" / "quick-results.json"), "quick-results.json")
    lay = layout(html, tmp_path)
    assert len(lay["tables"]) == 8 and all(t["w"] > 100 and t["h"] > 20 for t in lay["tables"])
    assert len(lay["svgs"]) == 5 and all(s["w"] > 300 and s["h"] > 300 for s in lay["svgs"])
    assert lay["svgTexts"] > 5 * 20  # titles, axis labels, ticks, legends: laid out as text
    img = screenshot(html, tmp_path)
    assert ink(img) > 0.02  # not a blank page (about 6% of this screen is ink)
    first_results = lay["tables"][3]  # after the run, the settings and the policy
    assert ink(region(img, first_results)) > 0.10
    plot = region(img, lay["svgs"][0])
    assert ink(plot) > 0.02 and near(plot, PLOT_BLUE) > 200  # the throughput line and its error bars
    assert near(img.crop((0, 0, WIDTH, int(lay["svgs"][0]["y"]))), PLOT_BLUE, tol=10) == 0  # only inside the plot


def test_a_comparison_renders_its_plot_and_table(tmp_path) -> None:
    base = results.load(DATA / "netperf" / "quick-results.json")
    new = results.load(DATA / "netperf" / "quick-policed-results.json")
    html = np_html.compare_page(compare.compare(base, new), base, new, ("before", "policed"))
    lay = layout(html, tmp_path)
    (svg,) = lay["svgs"]
    assert svg["w"] > 400 and svg["h"] > 200
    assert [t["h"] > 20 for t in lay["tables"]] == [True, True]  # the runs side by side, the figures
    img = screenshot(html, tmp_path)
    plot = region(img, svg)
    assert ink(plot) > 0.02 and near(plot, (0xC0, 0x39, 0x2B)) > 20  # a regression's point drawn in red


def test_an_isolation_report_renders_its_matrices_and_the_leak(tmp_path) -> None:
    result = iso_report.from_json(json.loads((DATA / "isolation-misconfigured.json").read_text()))
    html = iso_html.page(result, source="isolation-misconfigured.json")
    lay = layout(html, tmp_path)
    matrices = [t for t in lay["tables"] if t["cls"] == "matrix"]
    assert len(matrices) == 3 and all(m["w"] > 100 and m["h"] > 60 for m in matrices)
    img = screenshot(html, tmp_path)
    assert near(region(img, matrices[0]), LEAK_RED, tol=6) == 0  # the expected matrix has no leak
    for observed in matrices[1:]:
        assert near(region(img, observed), LEAK_RED, tol=6) > 200  # VM3's row: red cells, by both methods
