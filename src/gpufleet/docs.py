"""The rule catalog and policy defaults as text and Markdown (the README's tables are generated from this)."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules


def _fix(fix: dict) -> str:
    if fix.get("role"):
        text = f"role `{fix['role']}`, tag `{fix['tag']}`"
        return text + (f"; {fix['manual']}" if fix.get("manual") else "")
    return fix.get("manual") or ""


def _sources_markdown(refs: list) -> str:
    return "; ".join(f"[{ref['title']}]({ref['url']})" for ref in refs)


def catalog_markdown() -> str:
    lines = ["| id | area | severity | title | fix | sources |", "|---|---|---|---|---|---|"]
    for r in rules.catalog():
        lines.append(
            f"| `{r['id']}` | {r['area']} | {r['severity']} | {r['title']} | {_fix(r['fix'])} "
            f"| {_sources_markdown(r['references'])} |"
        )
    return "\n".join(lines)


def catalog_text() -> str:
    out = []
    for r in rules.catalog():
        out.append(f"{r['id']:<13} {r['area']:<9} {r['severity']:<9} {r['title']}")
        out.append(f"{'':<33}{r['rationale']}")
        out.append(f"{'':<33}fix: {_fix(r['fix'])}")
        for ref in r["references"]:
            out.append(f"{'':<33}source: {ref['title']} <{ref['url']}>")
    return "\n".join(out)


def policy_markdown() -> str:
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for path, default, doc in policy.documented():
        lines.append(f"| `{path}` | `{json.dumps(default)}` | {doc} |")
    return "\n".join(lines)
