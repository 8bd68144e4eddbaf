"""Every rule cites its sources (issue 13 §1; test_rule_catalog.py checks that each rule has some): the sources are
named once and all used, and `gpufleet catalog`, the README table and the HTML report show them."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema
from rule_cases import DOC_HOSTS

from gpufleet import docs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "reports" / "sample-v1.json"


def test_sources_are_named_once_and_all_used():
    named = {k: v for k, v in vars(sources).items() if k.isupper() and isinstance(v, tuple)}
    urls = [v[1] for v in named.values()]
    assert len(urls) == len(set(urls)), "a source is named twice"
    used = {ref for r in rules.RULES for ref in r.references}
    unused = sorted(k for k, v in named.items() if v not in used)
    assert not unused, f"sources no rule cites: {unused}"


def test_a_rule_without_references_is_refused():
    try:
        rules.Rule("X-TST-001", "memory", "low", "t", "r", lambda f, p: None, manual="m")
    except ValueError as exc:
        assert "references" in str(exc)
    else:
        raise AssertionError("a rule without references was accepted")


def test_catalog_text_and_markdown_show_the_sources():
    text, markdown = docs.catalog_text(), docs.catalog_markdown()
    flat = " ".join(text.split())  # the text catalog wraps long lines to fit a terminal
    for entry in rules.catalog():
        for ref in entry["references"]:
            assert f"source: {' '.join(ref['title'].split())} <{ref['url']}>" in flat
            assert f"[{ref['title']}]({ref['url']})" in markdown
    assert markdown.splitlines()[0].endswith("| sources |")


def test_html_finding_and_catalog_link_the_sources():
    report = json.loads(SAMPLE.read_text(encoding="utf-8"))
    catalog = {e["id"]: e for e in rules.catalog()}
    report = copy.deepcopy(report)
    report["catalog"] = [
        dict(e, references=catalog[e["id"]]["references"]) for e in report["catalog"] if e["id"] in catalog
    ]
    assert schema.validate(report) == []
    page = report_html.render_html(report)
    fm = catalog["SW-FM-001"]["references"][0]["url"]
    # the failing SW-FM-001 finding of sg-a100-01 links the fabric manager guide, safely
    assert re.search(rf'<p class="refs">Sources: <a href="{re.escape(fm)}" rel="noopener noreferrer">', page)
    # a threshold of ours (bench script) is named as text, never as a link
    assert 'href="bench/wan.py"' not in page and "bench/wan.py" in page
    for href in re.findall(r'href="([^"]+)"', page):
        assert href.startswith("#") or DOC_HOSTS.match(href), href
    # links navigate; nothing is loaded from outside (the CSP still forbids every fetch)
    assert not re.search(r'(src|action|srcset|data)="https?://', page)
    assert "default-src 'none'" in page


def test_every_numeric_threshold_says_where_it_comes_from():
    """A threshold of ours names its basis (docs/thresholds.md): every numeric policy key is listed there."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy

    text = (REPO / "docs" / "thresholds.md").read_text(encoding="utf-8")
    numeric = [
        path
        for path, default, _doc in policy.documented()
        if isinstance(default, (int, float)) and not isinstance(default, bool)
    ]
    assert numeric, "no numeric policy key found"
    missing = [path for path in numeric if f"`{path}`" not in text]
    assert not missing, f"docs/thresholds.md does not say where these come from: {missing}"
