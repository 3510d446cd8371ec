"""What a reader sees of a report page, measured in headless Chromium (not parsed from the HTML):
text clipped by its chart or its box, chart texts drawn over each other, and where the first
warnings sit at a 1400 px window. The page is copied with a script that measures its laid-out
elements after load and writes the result into the DOM, which ``--dump-dom`` returns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

MEASURE = r"""
<script>
window.addEventListener("load", function () {
  var out = {clipped: [], overlaps: [], boxes: [], warnings: [], width: window.innerWidth, height: window.innerHeight};
  function r(e) { return e.getBoundingClientRect(); }
  function label(e) { return (e.textContent || "").trim().slice(0, 80); }
  Array.prototype.forEach.call(document.querySelectorAll("svg"), function (svg, k) {
    var box = r(svg), texts = Array.prototype.slice.call(svg.querySelectorAll("text"));
    var rects = texts.map(r);
    texts.forEach(function (t, i) {
      var b = rects[i];
      if (b.width === 0) { return; }
      if (b.left < box.left - 1 || b.right > box.right + 1 || b.top < box.top - 1 || b.bottom > box.bottom + 1) {
        out.clipped.push({svg: k, text: label(t), chart: svg.getAttribute("aria-label")});
      }
      for (var j = 0; j < i; j++) {
        var c = rects[j];
        var w = Math.min(b.right, c.right) - Math.max(b.left, c.left);
        var h = Math.min(b.bottom, c.bottom) - Math.max(b.top, c.top);
        if (w > 2 && h > 2 && c.width > 0) {
          out.overlaps.push({svg: k, a: label(t), b: label(texts[j]), chart: svg.getAttribute("aria-label")});
        }
      }
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll("figcaption, td, th, p, h1, h2"), function (e) {
    var s = window.getComputedStyle(e);
    if (e.scrollWidth > e.clientWidth + 1 && (s.overflow === "hidden" || s.textOverflow === "ellipsis")) {
      out.boxes.push(label(e));
    }
  });
  Array.prototype.forEach.call(document.querySelectorAll(".warn, .muted"), function (e) {
    var b = r(e);
    if (e.closest("table")) { return; }
    out.warnings.push({text: label(e), top: b.top, right: b.right, cls: e.className});
  });
  var pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    """The headless browser, or a skip saying how to install it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Debian's chromium is not installed here (apt-get install -y chromium)")
    return found


def layout(page: Path, work: Path, width: int = 1400, height: int = 900) -> dict:
    """The laid-out page measured in Chromium at ``width`` x ``height``: ``clipped`` chart texts
    (outside their SVG), ``overlaps`` (two texts of one chart drawn over each other), ``boxes``
    (text cut by an element that hides its overflow) and ``warnings`` (each flag's position)."""
    work.mkdir(parents=True, exist_ok=True)
    probe = page.with_name(f".probe-{page.name}")
    text = page.read_text()
    probe.write_text(text.replace("</body>", MEASURE + "</body>") if "</body>" in text else text + MEASURE)
    try:
        flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", f"--user-data-dir={work / 'chrome'}", f"--window-size={width},{height}",
                 "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()]
        dom = subprocess.run(flags, check=True, capture_output=True, text=True, timeout=120).stdout
    finally:
        probe.unlink()
    found = dom.split('<pre id="layout-check">')[1].split("</pre>")[0]
    import html

    return json.loads(html.unescape(found))


def set_colours(pages: list[Path], sets: list[str]) -> dict[str, set[str]]:
    """Every colour each feature set is drawn in across ``pages``: its bars (a rect whose tooltip
    starts with the set's name) and its ROC curve's legend (text filled in its colour)."""
    import re

    found: dict[str, set[str]] = {s: set() for s in sets}
    for page in pages:
        text = page.read_text()
        for fill, name in re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"><title>([^<:]+): ', text):
            if name in found:
                found[name].add(fill)
        for fill, name in re.findall(r'font-size="11" fill="(#[0-9a-f]{6})">([^<(]+) \(', text):
            if name.strip() in found:
                found[name.strip()].add(fill)
    return found


def charts_without_intervals(page: Path) -> list[str]:
    """The bar charts of estimates (AUROC, a metric's mean, recall) on ``page`` whose bars with a
    value lack an interval whisker, or that lack their chance/null line."""
    import re

    bad = []
    for svg in re.findall(r'<svg [^>]*data-chart="bars".*?</svg>', page.read_text(), flags=re.S):
        title = re.search(r"<title>(.*?)</title>", svg).group(1)
        if "importances" in title:
            continue  # importance bars are shares of one classifier's gain, not estimates
        if not re.search(r"AUROC|mean over|recall", title):
            continue
        bars = len(re.findall(r"<rect ", svg))
        whiskers = len(re.findall(r"<title>(95% interval|\u00b11 SD over folds) \[", svg))
        line = 'stroke-dasharray="3"' in svg
        if whiskers < bars or not line:
            bad.append(f"{title}: {bars} bars, {whiskers} intervals, chance/null line {line}")
    return bad
