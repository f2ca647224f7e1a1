"""DVC's own plots render: the project's `plots:` section and `.dvc/plots/` templates, through the real
`dvc plots show` and `dvc plots diff`, drawn by Vega in headless Chromium.

The fixture builds a git + DVC repository in a temporary directory holding only dvc.yaml's `plots:` section, the
templates, and plot data written by the real code (``empriv.analysis.figures`` on constructed run tables,
``empriv.privacy.profiles`` on a small cube with the RDP accountant), committed twice with different data. The
HTML that DVC writes loads vega, vega-lite and vega-embed from a CDN this machine cannot reach: the browser serves
those exact URLs from the npm packages of the same versions (``npm pack``, cached under pytest's cache directory),
and every other http(s) request fails and is reported. The page is otherwise DVC's, unchanged; the only hook is
that each ``vegaEmbed`` call renders to SVG (not canvas), so the test can count the drawn marks.

Checks, for `show` and for `diff` (both revisions on one chart): every plot renders, and draws exactly the marks
its data calls for (one point per variance row, one bar per heuristic or risk with a value, one line per
(score, ε, method) or (target ε, accountant, configuration) series — per revision); ε = ∞ is on the variance and
heuristics axes; the δ axis of the profiles is logarithmic (labels are powers of ten), so is σ's;
every PNG figure loads. A plot definition like the old ones (x and y swapped in a bar template, ∞ on a numeric
axis) is caught. Skips, saying why, only where Chromium is missing (as the report's browser test) or npm cannot
provide the Vega libraries.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml
from analysis_tables import make_run_table
from test_report_browser import CHROMIUM, Chromium

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DELTA = 1e-5
GIT = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]

# ----------------------------------------------------------------------------------------------------- the browser
# Before the page's scripts run: keep every vegaEmbed call's promise and make it render SVG.
EMBED_HOOK = """
(() => {
  const embeds = [];
  let real;
  window.__emprivEmbeds = embeds;
  Object.defineProperty(window, "vegaEmbed", {
    configurable: true,
    set(fn) { real = fn; },
    get() {
      if (!real) return undefined;
      return (el, spec, opts) => {
        const p = real(el, spec, Object.assign({}, opts || {}, {renderer: "svg", actions: false}));
        embeds.push({el: String(el), p: p});
        return p;
      };
    },
  });
})();
"""

# After load: every plot's outcome, its mark groups (class, item count), texts and the compiled scales.
COLLECT = """
(async () => {
  const scales = (spec) => {
    const out = [];
    const walk = (node) => {
      if (Array.isArray(node)) { node.forEach(walk); return; }
      if (!node || typeof node !== "object") return;
      if (Array.isArray(node.scales)) {
        for (const s of node.scales) out.push({name: s.name, type: s.type || "linear", domain: JSON.stringify(s.domain)});
      }
      Object.values(node).forEach(walk);
    };
    walk(spec);
    return out;
  };
  const plots = [];
  for (const e of window.__emprivEmbeds) {
    const rec = {id: e.el.replace(/^#/, "")};
    try {
      const r = await e.p;
      const root = document.querySelector(e.el);
      const svg = root.querySelector("svg");
      rec.ok = true;
      rec.svg = svg ? {width: svg.getBoundingClientRect().width, height: svg.getBoundingClientRect().height} : null;
      rec.marks = [...root.querySelectorAll("g.role-mark")].map(g => ({cls: g.getAttribute("class"), n: g.children.length}));
      rec.texts = [...root.querySelectorAll("svg text")].map(t => t.textContent);
      rec.scales = scales(r.vgSpec);
    } catch (err) {
      rec.ok = false;
      rec.error = String(err && err.stack || err);
    }
    plots.push(rec);
  }
  const images = [...document.images].map(i => ({div: (i.closest("div[id]") || {}).id, complete: i.complete,
                                                  width: i.naturalWidth}));
  return {plots: plots, images: images};
})()
"""


class ServingChromium(Chromium):
    """Chromium that answers http(s) requests from ``routes`` (url → bytes) and fails every other one."""

    def __init__(self, routes: dict[str, bytes]):
        super().__init__()
        self.routes, self.blocked, self._own_id = routes, [], 10**6

    def _read(self, deadline: float) -> dict:
        while True:
            m = super()._read(deadline)
            if m.get("method") != "Fetch.requestPaused":
                return m
            self._answer(m)

    def _answer(self, m: dict) -> None:
        params, self._own_id = m["params"], self._own_id + 1
        body = self.routes.get(params["request"]["url"])
        if body is None:
            self.blocked.append(params["request"]["url"])
            msg = {"method": "Fetch.failRequest", "params": {"requestId": params["requestId"], "errorReason": "BlockedByClient"}}
        else:
            msg = {"method": "Fetch.fulfillRequest", "params": {
                "requestId": params["requestId"], "responseCode": 200, "body": base64.b64encode(body).decode(),
                "responseHeaders": [{"name": "Content-Type", "value": "application/javascript; charset=utf-8"},
                                    {"name": "Access-Control-Allow-Origin", "value": "*"}]}}
        msg.update(id=self._own_id, sessionId=m["sessionId"])  # replies to these ids are kept as events, unread
        os.write(self.w_in, json.dumps(msg).encode() + b"\0")


def render_dvc_html(html: Path, routes: dict[str, bytes], screenshot: Path | None = None) -> dict:
    """Load DVC's ``index.html``; every plot's marks, texts and scales, the images, blocked requests and errors
    (and a full-page screenshot, if asked)."""
    browser = ServingChromium(routes)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})
        session = browser.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            browser.send(domain, session=session)
        browser.send("Fetch.enable", {"patterns": [{"urlPattern": "http://*"}, {"urlPattern": "https://*"}]}, session=session)
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": EMBED_HOOK}, session=session)
        browser.send("Page.navigate", {"url": html.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", timeout=120)
        state = browser.send("Runtime.evaluate", {"expression": COLLECT, "awaitPromise": True, "returnByValue": True},
                             session=session, timeout=120)
        if "exceptionDetails" in state:
            raise AssertionError(f"collecting the plots failed: {state['exceptionDetails']}")
        result = state["result"]["value"]
        if screenshot is not None:
            shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        errors, warnings = [], []
        for e in browser.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                (warnings if params["type"] == "warning" else errors).append(text)
            elif method == "Runtime.exceptionThrown":
                errors.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        result.update(errors=errors, warnings=warnings, blocked=list(browser.blocked))
        return result
    finally:
        browser.close()


# ------------------------------------------------------------------------------------------ the Vega libraries
def _script_urls() -> list[tuple[str, str, str]]:
    """(url, package, version) of every script DVC's HTML loads (read from the installed dvc-render)."""
    from dvc_render.vega import VegaRenderer

    found = re.findall(r'src="(https://cdn\.jsdelivr\.net/npm/([a-z-]+)@([0-9][^"/]*))"', VegaRenderer.SCRIPTS)
    assert found, f"no CDN script in dvc-render's VegaRenderer.SCRIPTS: {VegaRenderer.SCRIPTS!r}"
    return found


def _fetch_with_npm(package: str, version: str, dest: Path) -> None:
    """The file a CDN serves for ``package@version`` (package.json's jsdelivr/unpkg/browser field), via ``npm pack``."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm not found: it fetches {package}@{version}, which DVC's plot HTML loads (Debian's npm package)")
    with tempfile.TemporaryDirectory(prefix="empriv-npm-") as tmp:
        proc = subprocess.run([npm, "pack", f"{package}@{version}", "--pack-destination", tmp, "--silent"],
                              capture_output=True, text=True, timeout=300)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or not tarballs:
            pytest.skip(f"`npm pack {package}@{version}` failed (no registry?): {proc.stderr.strip()[-300:]}")
        with tarfile.open(tarballs[0]) as tar:
            meta = json.load(tar.extractfile("package/package.json"))
            entry = next(meta[k] for k in ("jsdelivr", "unpkg", "browser") if isinstance(meta.get(k), str))
            data = tar.extractfile("package/" + entry.removeprefix("./")).read()
    part = dest.with_suffix(".part")
    part.write_bytes(data)
    part.replace(dest)


@pytest.fixture(scope="module")
def vega_routes(request) -> dict[str, bytes]:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"headless Chromium not found at {CHROMIUM}: install Debian's `chromium` package "
                    "(`make test` does so when run as root with apt-get) to run the DVC plots' browser test")
    cache_provider = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`
    cache = (Path(cache_provider.mkdir("empriv-vega")) if cache_provider is not None
             else Path(tempfile.gettempdir()) / "empriv-vega")
    cache.mkdir(parents=True, exist_ok=True)
    routes = {}
    for url, package, version in _script_urls():
        path = cache / f"{package}@{version}.js"
        if not path.exists():
            _fetch_with_npm(package, version, path)
        routes[url] = path.read_bytes()
    return routes


# --------------------------------------------------------------------------------------------- the repository
def project_plots() -> list:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["plots"]


def _run(cmd: list[str], cwd: Path) -> str:
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def acr_score_records(seed: int) -> list[dict]:
    """Score records of a small cube as the score stage writes them: three secrets (two frequent, one rare), ε ∈ {2, 8,
    ∞} × 2 seeds, ACR found more often as ε grows (``seed`` shifts which searches succeed)."""
    secrets = [("secret-00", "phone_block", 300, 0.1), ("secret-01", "forwarded_by", 150, 0.05),
               ("secret-02", "address_list", 3, 0.001)]
    records = []
    for e_i, eps in enumerate([2, 8, "inf"]):
        for run_seed in (0, 1):
            rows = []
            for k, (sid, kind, occ, freq) in enumerate(secrets):
                found = (e_i + run_seed + seed + k) % 3 != 2 and (freq > 0.01 or eps == "inf")
                rows.append({"id": sid, "kind": kind, "occurrences": occ, "frequency": freq, "acr_success": found,
                             "acr": 2.0 + e_i + k if found else None, "acr_upper_bound": None if found else 1.5})
            records.append({"epsilon": eps, "seed": run_seed, "config": f"eps{eps}-b8-T10-lr0.01-s{run_seed}",
                            "acr_protocol": {"ran": True, "rare_frequency": 0.01}, "per_secret": rows})
    return records


def write_plot_files(work: Path, *, seed: int, steps: tuple[int, ...]) -> None:
    """plots/analysis/ and plots/profiles/ as the analyze and profiles stages write them (real code, small inputs)."""
    from empriv.analysis.figures import make_figures, write_plot_data
    from empriv.analysis.stage import compute_analysis
    from empriv.privacy.profiles import cube_profiles, profile_figures, profiles_csv

    analysis_dir, profiles_dir = work / "plots" / "analysis", work / "plots" / "profiles"
    for d in (analysis_dir, profiles_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    analysis, configs = compute_analysis(make_run_table(seed=seed), privacy_scores=["exposure_gap_mean", "acr_mean"],
                                         monte_carlo_trials=50, base_utility=2.0)
    assert set(make_figures(analysis, configs, analysis_dir)) == {"variance", "jitter", "one_at_a_time",
                                                                  "hyperparameters", "heuristics", "selection", "risks"}
    from empriv.analysis.acr_frequency import acr_by_frequency

    analysis["acr_by_frequency"] = acr_by_frequency(acr_score_records(seed))  # the analyze stage adds it so
    write_plot_data(analysis, configs, analysis_dir)
    rows = cube_profiles([2.0, 8.0, math.inf], [20, 100], list(steps), 1000, DELTA, "rdp")
    (profiles_dir / "profiles.csv").write_text(profiles_csv(rows), encoding="utf-8")
    for name, png in profile_figures(rows, DELTA).items():
        (profiles_dir / name).write_bytes(png)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """Two commits of plot data (seed 0 with T ∈ {10}; seed 1 with T ∈ {10, 20}) under the project's plots section."""
    work = tmp_path_factory.mktemp("dvc-plots") / "repo"
    work.mkdir()
    _run(["git", "init", "-q"], work)
    _run(["dvc", "init", "-q"], work)
    (work / "dvc.yaml").write_text(yaml.safe_dump({"plots": project_plots()}, allow_unicode=True), encoding="utf-8")
    (work / ".dvc" / "plots").mkdir(exist_ok=True)
    templates = sorted((ROOT / ".dvc" / "plots").glob("*.json"))
    assert templates, "no plot template in .dvc/plots/"
    for t in templates:
        shutil.copy2(t, work / ".dvc" / "plots" / t.name)
    for i, (seed, steps) in enumerate([(0, (10,)), (1, (10, 20))]):
        write_plot_files(work, seed=seed, steps=steps)
        _run(["git", "add", "-A"], work)
        _run(GIT + ["commit", "-qm", f"plot data {i}"], work)
    return work


def _csv(work: Path, rev: str, path: str) -> list[dict]:
    text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=work, capture_output=True, text=True, check=True).stdout
    return list(csv.DictReader(io.StringIO(text)))


def _filled(rows: list[dict], column: str) -> list[dict]:
    return [r for r in rows if r[column] != ""]


def expected_marks(work: Path, revs: list[str]) -> dict[str, dict[str, int]]:
    """Per plot div id: the number of items each kind of mark must draw, summed over ``revs``."""
    want: dict[str, dict[str, int]] = {}

    def add(plot: str, mark: str, n: int) -> None:
        want.setdefault(plot, {}).setdefault(mark, 0)
        want[plot][mark] += n

    for rev in revs:
        profiles = _csv(work, rev, "plots/profiles/profiles.csv")
        series = {(r["target_epsilon"], r["accountant"], r["config"]) for r in profiles}
        panels = {(r["target_epsilon"], r["accountant"]) for r in profiles}
        add("plots_profiles_profiles_csv", "line", len(series))
        add("plots_profiles_profiles_csv", "symbol", len(profiles))  # a point on every (δ, ε)
        add("plots_profiles_profiles_csv", "rule", len(panels))  # the target δ
        add("calibrated_sigma", "symbol", len(series))  # one σ per configuration
        add("calibrated_sigma", "line", len({(r["target_epsilon"], r["accountant"], r["steps"]) for r in profiles}))
        variance = _csv(work, rev, "plots/analysis/variance.csv")
        add("plots_analysis_variance_csv", "symbol", len(_filled(variance, "value")))
        add("plots_analysis_variance_csv", "text", len({(r["score"], r["group"]) for r in _filled(variance, "value")}))
        jitter = _csv(work, rev, "plots/analysis/jitter.csv")  # the variance template: a point per row, a label per ε
        add("plots_analysis_jitter_csv", "symbol", len(_filled(jitter, "value")))
        add("plots_analysis_jitter_csv", "text", len({(r["score"], r["group"]) for r in _filled(jitter, "value")}))
        table8 = _csv(work, rev, "plots/analysis/seed_vs_configuration.csv")  # a bar per defined ratio
        add("plots_analysis_seed_vs_configuration_csv", "rect", len(_filled(table8, "ratio")))
        fig5 = _csv(work, rev, "plots/analysis/one_at_a_time.csv")  # a point per row, a line per (panel, ε)
        add("plots_analysis_one_at_a_time_csv", "symbol", len(_filled(fig5, "mean")))
        add("plots_analysis_one_at_a_time_csv", "line", len({(r["panel"], r["epsilon"]) for r in _filled(fig5, "mean")}))
        heuristics = _csv(work, rev, "plots/analysis/heuristics.csv")  # a bar per accuracy, a tick per random guess
        add("plots_analysis_heuristics_csv", "rect", len(_filled(heuristics, "accuracy")) + len(_filled(heuristics, "random_baseline")))
        risks = _csv(work, rev, "plots/analysis/risks.csv")
        add("plots_analysis_risks_csv", "rect", len(_filled(risks, "absolute_risk")))
        add("relative_risk", "rect", len(_filled(risks, "relative_risk")))
        frequency = _csv(work, rev, "plots/analysis/acr_by_frequency.csv")  # a point per (ε, secret), a line per ε
        add("plots_analysis_acr_by_frequency_csv", "symbol", len(_filled(frequency, "success_rate")))
        add("plots_analysis_acr_by_frequency_csv", "line", len({r["epsilon"] for r in _filled(frequency, "success_rate")}))
        selection = _csv(work, rev, "plots/analysis/selection.csv")
        add("plots_analysis_selection_csv", "symbol", len(selection))
        add("plots_analysis_selection_csv", "line", len({(r["score"], r["epsilon"], r["method"]) for r in selection}))
    want["plots_analysis_seed_vs_configuration_csv"]["rule"] = 1  # the dashed 1, once per chart
    return want


def drawn_marks(plot: dict) -> dict[str, int]:
    """Items drawn per mark type (symbol: points, rect: bars and ticks, line: one per series, rule, text)."""
    out: dict[str, int] = {}
    for m in plot["marks"]:
        kind = re.match(r"mark-(\w+)", m["cls"]).group(1)
        out[kind] = out.get(kind, 0) + m["n"]
    return out


def _render(repo: Path, routes: dict, command: list[str], out: str) -> dict:
    """`dvc plots <command> -o <out>`, rendered; the screenshot goes to $EMPRIV_SCREENSHOT_DIR/dvc-plots-<out>.png too."""
    _run(["dvc", "plots", *command, "-o", out], repo)
    html = repo / out / "index.html"
    assert html.is_file()
    shot = repo / out / "screenshot.png"
    result = render_dvc_html(html, routes, shot)
    if os.environ.get("EMPRIV_SCREENSHOT_DIR"):
        dest = Path(os.environ["EMPRIV_SCREENSHOT_DIR"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shot, dest / f"dvc-plots-{out}.png")
    return result


@pytest.fixture(scope="module")
def shown(repo, vega_routes) -> dict:
    return _render(repo, vega_routes, ["show"], "shown")


@pytest.fixture(scope="module")
def diffed(repo, vega_routes) -> dict:
    return _render(repo, vega_routes, ["diff", "HEAD~1", "HEAD"], "diffed")


VEGA_PLOTS = {"plots_profiles_profiles_csv", "calibrated_sigma", "plots_analysis_variance_csv",
              "plots_analysis_jitter_csv", "plots_analysis_seed_vs_configuration_csv", "plots_analysis_one_at_a_time_csv",
              "plots_analysis_heuristics_csv", "plots_analysis_selection_csv", "plots_analysis_risks_csv", "relative_risk",
              "plots_analysis_acr_by_frequency_csv"}


def check_rendered(result: dict, want: dict[str, dict[str, int]], n_revs: int, repo: Path) -> None:
    assert result["blocked"] == [], f"requests to elsewhere: {result['blocked']}"
    assert result["errors"] == [], result["errors"]
    # Vega-Lite's own warnings (a dropped channel, an infinite extent, …); its notes on the spec's version are not
    assert [w for w in result["warnings"] if w.startswith("WARN")] == [], result["warnings"]
    plots = {p["id"]: p for p in result["plots"]}
    assert set(plots) == VEGA_PLOTS
    for pid, plot in plots.items():
        assert plot["ok"], f"{pid}: {plot.get('error')}"
        assert plot["svg"] and plot["svg"]["width"] > 100 and plot["svg"]["height"] > 100, (pid, plot["svg"])
        drawn = drawn_marks(plot)
        for mark, n in want[pid].items():
            assert n > 0, (pid, mark)
            assert drawn.get(mark, 0) == n, f"{pid}: {drawn.get(mark, 0)} {mark} items drawn, the data has {n}"
    # ε = ∞ is a category of the variance and heuristics plots
    assert "ε=∞" in plots["plots_analysis_variance_csv"]["texts"]
    assert "ε=∞" in plots["plots_analysis_jitter_csv"]["texts"] and "ε = ∞" in plots["plots_analysis_seed_vs_configuration_csv"]["texts"]
    assert "ε = ∞" in plots["plots_analysis_one_at_a_time_csv"]["texts"]  # the legend
    fig5 = plots["plots_analysis_one_at_a_time_csv"]  # the varied hyperparameter on a log axis (per panel)
    assert any(s["type"] == "log" and '"value"' in s["domain"] for s in fig5["scales"]), fig5["scales"]
    assert "ε = ∞" in plots["plots_analysis_heuristics_csv"]["texts"]
    freq = plots["plots_analysis_acr_by_frequency_csv"]  # ACR by secret frequency: ∞ in the legend, frequency on a log axis
    assert "∞" in freq["texts"] and {"frequent", "rare"} <= set(freq["texts"])
    assert any(s["type"] == "log" and "frequency" in s["domain"] for s in freq["scales"]), freq["scales"]
    # log axes: δ of the profiles (labels are powers of ten over several decades), σ of the calibrated σ
    prof = plots["plots_profiles_profiles_csv"]
    assert any(s["type"] == "log" and "delta" in s["domain"] for s in prof["scales"]), prof["scales"]
    decades = sorted({float(t) for t in prof["texts"] if re.fullmatch(r"1e[-+]?\d+", t)})
    assert len(decades) >= 4 and all(math.isclose(b / a, 10.0) for a, b in zip(decades, decades[1:])), decades
    sigma = plots["calibrated_sigma"]
    assert any(s["type"] == "log" and "noise_multiplier" in s["domain"] for s in sigma["scales"]), sigma["scales"]
    b = [s for s in sigma["scales"] if s["name"] == "x"]
    assert len(b) == 1 and b[0]["type"] in ("band", "point") and "batch_size" in b[0]["domain"], sigma["scales"]
    assert {"20", "100"} <= set(sigma["texts"])  # b in numeric order, one tick per batch size of the cube
    # every PNG figure, once per revision
    pngs = sorted(p.relative_to(repo).as_posix() for p in (repo / "plots").rglob("*.png"))
    assert len(pngs) == 7 + 2  # seven analysis figures, one profile figure per finite ε
    imgs = result["images"]
    assert sorted({i["div"] for i in imgs}) == sorted(re.sub(r"[/.]", "_", p) for p in pngs)
    assert len(imgs) == len(pngs) * n_revs
    broken = [i for i in imgs if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"figures that did not load: {broken}"


def test_every_plot_renders_with_dvc_plots_show(repo, shown):
    check_rendered(shown, expected_marks(repo, ["HEAD"]), 1, repo)


def test_both_revisions_render_on_one_chart_with_dvc_plots_diff(repo, diffed):
    check_rendered(diffed, expected_marks(repo, ["HEAD~1", "HEAD"]), 2, repo)
    # σ of finite ε ∈ {2, 8} × (rdp, moments) × b ∈ {20, 100} × T: T ∈ {10} first, T ∈ {10, 20} second — both drawn
    assert expected_marks(repo, ["HEAD~1"])["calibrated_sigma"]["symbol"] == 8
    assert expected_marks(repo, ["HEAD"])["calibrated_sigma"]["symbol"] == 16
    assert drawn_marks({p["id"]: p for p in diffed["plots"]}["calibrated_sigma"])["symbol"] == 24
    texts = sum((p["texts"] for p in diffed["plots"]), [])
    assert "HEAD~1" in texts and "HEAD" in texts  # the revisions' legend


def test_the_old_plot_definitions_are_caught(repo, vega_routes, tmp_path):
    """The definitions this section replaced: a bar template with x and y swapped draws nothing, ε on a numeric
    axis drops ∞ — the checks above tell both."""
    old = tmp_path / "old"
    shutil.copytree(repo, old)
    (old / "dvc.yaml").write_text(yaml.safe_dump({"plots": [
        {"plots/analysis/heuristics.csv": {"x": "rule", "y": "accuracy", "template": "bar_horizontal"}},
        {"plots/analysis/variance.csv": {"x": "epsilon", "y": "value", "template": "scatter"}},
    ]}), encoding="utf-8")
    result = _render(old, vega_routes, ["show"], "old")
    plots = {p["id"]: drawn_marks(p) for p in result["plots"]}
    assert plots["plots_analysis_heuristics_csv"].get("rect", 0) == 0
    variance = _filled(_csv(repo, "HEAD", "plots/analysis/variance.csv"), "value")
    finite = [r for r in variance if r["epsilon"] != "inf"]
    assert 0 < len(finite) < len(variance)
    assert plots["plots_analysis_variance_csv"]["symbol"] == len(finite)  # every ∞ point dropped


@pytest.mark.optional(reason="a manual check of HTML written elsewhere")
def test_existing_dvc_plots_html_renders(request):
    """Check HTML that `dvc plots show`/`diff` wrote elsewhere (e.g. in the project), when EMPRIV_DVC_PLOTS_HTML names it."""
    target = os.environ.get("EMPRIV_DVC_PLOTS_HTML")
    if not target:
        pytest.skip("EMPRIV_DVC_PLOTS_HTML not set (point it at dvc_plots/index.html after `dvc plots show`)")
    result = render_dvc_html(Path(target), request.getfixturevalue("vega_routes"))
    assert result["blocked"] == [] and result["errors"] == [], (result["blocked"], result["errors"])
    assert result["plots"] and all(p["ok"] and sum(m["n"] for m in p["marks"]) > 0 for p in result["plots"]), \
        [(p["id"], p.get("error"), drawn_marks(p) if p.get("ok") else None) for p in result["plots"]]
    assert all(i["complete"] and i["width"] > 0 for i in result["images"])
