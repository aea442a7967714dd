"""``kiln report --html``: the page written from a real tuning database (tests/support/report_db.py: runs
of the real autotuner with a stand-in GPU, a run of hostile strings, an unfinished run), read
back with ``html.parser`` and loaded in a real headless Chromium (tests/support/browser.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from support import browser, report_db
from support.basics import wait_no_processes
from triton_kiln import CompilePool
from triton_kiln.cli import main
from triton_kiln.tuning import TuningRun

pytestmark = pytest.mark.timeout(300)

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "source", "wbr", "area", "base"}
SVG_VOID = {"rect", "line"}  # written self-closed (<rect .../>) unless they carry a <title>


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def all(self, tag: str, **attrs: str) -> list[Node]:
        """Descendants with ``tag`` whose attributes hold ``attrs`` (``class_``: one of its classes)."""
        found = []
        for child in self.children:
            if child.tag == tag and all(_has(child, k, v) for k, v in attrs.items()):
                found.append(child)
            found += child.all(tag, **attrs)
        return found

    def content(self) -> str:
        return self.text + "".join(child.content() for child in self.children)


def _has(node: Node, key: str, value: str) -> bool:
    if key == "class_":
        return value in node.attrs.get("class", "").split()
    return node.attrs.get(key.replace("_", "-")) == value


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(Node("#text", {}, text=data))


def parse(text: str) -> Node:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    assert tree.stack == [tree.root], "unclosed elements: " + ", ".join(n.tag for n in tree.stack[1:])
    return tree.root


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(root / "triton-cache"))
        pool = CompilePool(cache_dir=root / "cache", workers=2)
        try:
            built = report_db.build(pool, root / "tuning.sqlite3")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        assert not wait_no_processes(pool.pool_id)
    built["path"] = root / "tuning.sqlite3"
    return built


@pytest.fixture(scope="module")
def page(database: dict[str, Any]) -> Path:
    """The page, written by the command line as a user runs it."""
    target = database["path"].parent / "report.html"
    result = CliRunner().invoke(
        main, ["report", "--db", str(database["path"]), "--html", str(target), "--limit", "10"]
    )
    assert result.exit_code == 0, result.output
    assert f"written: {target} (5 runs shown, 5 in the database)" in result.output
    return target


def section(tree: Node, run: TuningRun) -> Node:
    [found] = tree.all("section", data_run=str(run.run_id))
    return found


def by_kernel(database: dict[str, Any]) -> dict[str, list[TuningRun]]:
    runs: dict[str, list[TuningRun]] = {}
    for run in reversed(database["runs"]):  # oldest first
        runs.setdefault(run.kernel, []).append(run)
    return runs


def test_every_run_is_in_the_table_with_a_section(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    [table] = tree.all("table", class_="runs")
    runs = database["runs"]
    assert len(runs) == 5
    assert [row.attrs["data-run"] for row in table.all("tr") if "data-run" in row.attrs] == [
        str(run.run_id) for run in runs
    ]
    for run in runs:
        assert run.kernel in section(tree, run).all("h2")[0].content()
        rows = [r for r in section(tree, run).all("tr") if "data-status" in r.attrs]
        assert [r.attrs["data-label"] for r in rows] == [result.label for result in run.results]


def test_failures_are_listed_and_plotted_with_their_causes(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    [a, b, _] = by_kernel(database)["scale_kernel"]
    causes = [
        (a, "compile_error", "power of 2"),
        (a, "bench_crashed", "SIGSEGV"),
        (b, "wrong_output", "differs from the 3 of 4 configs that agree"),
    ]
    for run, status, cause in causes:
        node = section(tree, run)
        [row] = [r for r in node.all("tr") if r.attrs.get("data-status") == status]
        assert "failed" in row.attrs["class"].split()
        assert cause in row.content()
        [mark] = node.all("text", class_="fail", data_status=status)  # on the runtimes plot
        assert cause in mark.content()
        assert row.attrs["data-label"] == mark.attrs["data-label"]


def test_the_chosen_config_is_marked(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    finished = [run for run in database["runs"] if run.finished]
    assert len(finished) == 4
    for run in finished:
        node = section(tree, run)
        [choice] = node.all("div", class_="choice")
        assert choice.attrs["data-chosen"] == run.best_label
        [bar] = node.all("rect", class_="chosen")
        assert bar.attrs["data-label"] == run.best_label
        assert [r.attrs["data-label"] for r in node.all("tr", class_="chosen")] == [run.best_label]
    a_tuner = database["tuners"][0]
    first = by_kernel(database)["scale_kernel"][0]
    statuses = [(r.label, r.status, r.reason, r.runtime_ms) for r in first.results]
    assert first.best_label.startswith("BLOCK=256"), statuses
    assert a_tuner.best_config.kwargs == {"BLOCK": 256}


def test_configs_passed_over_say_why(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    [a, b, c] = by_kernel(database)["scale_kernel"]
    passed = {
        r.attrs["data-label"]: r.content() for r in section(tree, a).all("tr") if r.attrs.get("data-label")
    }
    nan = "BLOCK=64, num_warps=4, num_stages=3, num_ctas=1"
    [table] = section(tree, a).all("table", class_="passed-over")
    [row] = [r for r in table.all("tr") if r.attrs.get("data-label") == nan]
    assert "faster, but flagged: out_ptr: the run wrote NaN/Inf" in row.content()
    assert "too few to reject" in passed[nan]
    assert section(tree, a).all("rect", class_="flagged", data_label=nan)
    [table] = section(tree, b).all("table", class_="passed-over")
    assert "rejected by the output check" in table.content()
    assert "% slower" in table.content()
    assert not section(tree, a).all("div", class_="warning")
    [warning] = section(tree, c).all("div", class_="warning")
    assert "No config's outputs could be confirmed" in warning.content()


def test_time_split_and_compile_times(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    [a, b, _] = by_kernel(database)["scale_kernel"]
    for run in (a, b):
        assert run.split is not None
        [chart] = section(tree, run).all("svg", class_="split")
        parts = {node.attrs["data-part"]: float(node.attrs["data-seconds"]) for node in chart.all("rect")
                 if "data-seconds" in node.attrs}  # fmt: skip
        for key, seconds in run.split.items():
            assert parts[key] == pytest.approx(seconds, abs=1e-3)
        [compiles] = section(tree, run).all("svg", class_="compile")
        columns = {n.attrs["data-label"]: float(n.attrs["data-seconds"]) for n in compiles.all("rect")}
        assert columns == {
            r.label: pytest.approx(r.compile_s, abs=1e-3) for r in run.results if r.compile_s is not None
        }
    inside = {n.attrs.get("data-part") for n in section(tree, b).all("rect")}
    assert {"sandbox_check_s", "sandbox_timing_s", "round_trip_s"} <= inside  # the native sandbox's own
    assert "sandbox_check_s" not in {n.attrs.get("data-part") for n in section(tree, a).all("rect")}


def test_an_unfinished_run_is_shown_as_such(database: dict[str, Any], page: Path) -> None:
    tree = parse(page.read_text())
    [run] = [run for run in database["runs"] if not run.finished]
    assert run.run_id == database["unfinished_id"]
    assert "unfinished" in section(tree, run).content()
    [row] = tree.all("tr", data_run=str(run.run_id))
    assert row.attrs["class"] == "unfinished"


def test_strings_from_the_database_are_escaped(database: dict[str, Any], page: Path) -> None:
    text = page.read_text()
    assert "<script" not in text.lower()
    assert "<img" not in text.lower()
    assert "<b>" not in text
    assert "<i>" not in text
    tree = parse(text)
    [run] = [run for run in database["runs"] if run.run_id == database["hostile_id"]]
    node = section(tree, run)
    assert report_db.HOSTILE_KERNEL in node.all("h2")[0].content()  # shown as text, whole
    assert report_db.HOSTILE_KEY in node.content()
    assert report_db.HOSTILE_REASON in node.content()
    for tag in ("script", "img", "b", "i"):
        assert not tree.all(tag), tag


def test_the_page_fetches_nothing(page: Path) -> None:
    tree = parse(page.read_text())
    [csp] = tree.all("meta", http_equiv="Content-Security-Policy")
    assert "default-src 'none'" in csp.attrs["content"]
    links = [n.attrs for n in tree.all("a")]
    assert links
    assert all(a["href"].startswith("#run-") for a in links)
    for tag in ("link", "script", "img", "iframe", "object", "embed"):
        assert not tree.all(tag), tag
    text = page.read_text()
    assert text.count("http") == text.count("http://www.w3.org/2000/svg") + text.count('http-equiv="')


# -- a real browser -------------------------------------------------------------------------------


def needs_browser() -> None:
    if browser.find_browser() is None:
        pytest.skip(
            "no Chromium on PATH (looked for " + ", ".join(browser.BROWSERS) + "); CI installs Debian's "
            "chromium in .ci/run; elsewhere: apt-get install chromium"
        )


def test_the_browser_harness_sees_console_errors_and_failed_loads(tmp_path: Path) -> None:
    """The harness below can fail: a page with a console error, an exception and a missing image."""
    needs_browser()
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><body><p id="x">hi</p><script>console.error("BOOM"); missing();</script>'
        '<img src="missing.png"></body></html>'
    )
    loaded = browser.load(bad, ("document.getElementById('x').textContent",))
    texts = " | ".join(m["text"] for m in loaded.errors())
    for expected in ("BOOM", "missing is not defined", "ERR_FILE_NOT_FOUND"):
        assert expected in texts
    assert loaded.values == {"document.getElementById('x').textContent": "hi"}


QUERIES = {
    "title": "document.title",
    "sections": "document.querySelectorAll('section.run').length",
    "rows": "document.querySelectorAll('table.runs tr[data-run]').length",
    "charts": "[...document.querySelectorAll('svg.chart')].map(s => s.getBoundingClientRect().width > 500"
    " && s.getBoundingClientRect().height > 20).filter(Boolean).length",
    "svgs": "document.querySelectorAll('svg.chart').length",
    "chosen": "[...document.querySelectorAll('div.choice')].map(d => d.dataset.chosen)",
    "fails": "[...document.querySelectorAll('svg text.fail')].map(t => t.dataset.status)",
    "scripts": "document.querySelectorAll('script, img').length",
    "bars": "[...document.querySelectorAll('rect.bar')].filter(r => r.getBBox().width > 0).length",
}


def test_the_page_renders_in_headless_chromium_without_console_errors(
    database: dict[str, Any], page: Path
) -> None:
    needs_browser()
    loaded = browser.load(page, tuple(QUERIES.values()))
    assert loaded.errors() == []
    got = {name: loaded.values[expression] for name, expression in QUERIES.items()}
    assert got["title"] == "kiln tuning report"  # the hostile kernel's script never ran
    assert got["sections"] == got["rows"] == 5
    runs = database["runs"]
    pictures = sum(
        1 + (run.split is not None) + any(r.compile_s is not None for r in run.results) for run in runs
    )
    assert (
        got["charts"] == got["svgs"] == pictures == 13
    )  # runtimes; time split and compiles (not unfinished)
    finished = [run for run in database["runs"] if run.finished]
    assert got["chosen"] == [run.best_label for run in finished]
    assert sorted(got["fails"]) == sorted(
        r.status for run in database["runs"] for r in run.results if not r.ok
    )
    assert got["scripts"] == 0
    assert got["bars"] == sum(1 for run in database["runs"] for r in run.results if r.ok)


def test_the_final_round_is_shown_with_each_finalists_screening_time(
    database: dict[str, Any], page: Path
) -> None:
    tree = parse(page.read_text())
    [a, b, _] = by_kernel(database)["scale_kernel"]
    screened = {r.label.split(",")[0]: r.screen_ms for r in b.results}
    assert screened == {"BLOCK=32": None, "BLOCK=64": None, "BLOCK=128": 0.7, "BLOCK=256": 0.75}
    assert b.best_label.startswith("BLOCK=256")  # the final round overturned the screening
    node = section(tree, b)
    assert "2 timed again in the final round" in node.content()
    marks = {
        m.attrs["data-label"].split(",")[0]: float(m.attrs["data-ms"])
        for m in node.all("rect", class_="screen")
    }
    assert marks == {"BLOCK=128": 0.7, "BLOCK=256": 0.75}
    [table] = node.all("table", class_="passed-over")
    rows = {
        r.attrs["data-label"].split(",")[0]: r.content() for r in table.all("tr") if "data-label" in r.attrs
    }
    assert "slower in the final round (screening: 0.7000 ms)" in rows["BLOCK=128"]
    assert "slower at screening (outside the final round's margin)" in rows["BLOCK=64"]
    assert not section(tree, a).all("rect", class_="screen")  # one pass: no final round


def test_html_with_json_and_of_an_empty_database(tmp_path: Path) -> None:
    from triton_kiln.tuning import ConfigResult, TuningDatabase, read_json

    path = tmp_path / "tuning.sqlite3"
    TuningDatabase(path).close()  # an empty database: a page that says so
    empty = tmp_path / "empty.html"
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--html", str(empty)])
    assert result.exit_code == 0, result.output
    assert "(0 runs shown, 0 in the database)" in result.output
    assert "No runs to show" in parse(empty.read_text()).content()
    with TuningDatabase(path) as db:
        run_id = db.begin_run(
            "matmul", "k" * 64, '["4096"]', "NVIDIA H200", "9.0", "3.6.0", default_label="A"
        )
        db.record(run_id, ConfigResult("A", {"kwargs": {}}, "ok", compile_s=1.0, runtime_ms=1.0))
        db.finish_run(run_id, "A", 2.0, 1.0)
    page, out = tmp_path / "sub" / "report.html", tmp_path / "json"
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--html", str(page), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "kernel matmul" not in result.output  # the page instead of the tables
    [written] = out.glob("*.json")
    assert read_json(written).best_label == "A"
    assert parse(page.read_text()).all("div", class_="choice", data_chosen="A")
