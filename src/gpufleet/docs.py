"""The rule catalog and policy defaults as text and Markdown (the README's tables are generated from this)."""

from __future__ import annotations

import json
import textwrap

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules


def _fix(fix: dict) -> str:
    if fix.get("role"):
        text = f"role `{fix['role']}`, tag `{fix['tag']}`"
        return text + (f"; {fix['manual']}" if fix.get("manual") else "")
    return fix.get("manual") or ""


def _sources_markdown(refs: list) -> str:
    return "; ".join(f"[{ref['title']}]({ref['url']})" for ref in refs)


def _rules(ids: list[str] | None = None) -> list[dict]:
    """The catalog, or its rules ``ids`` in that order (ids known: see ``unknown_ids``)."""
    catalog = rules.catalog()
    if ids is None:
        return catalog
    by_id = {r["id"]: r for r in catalog}
    return [by_id[i] for i in ids if i in by_id]


def unknown_ids(ids: list[str]) -> list[str]:
    """The ids of ``ids`` that name no rule of the catalog."""
    known = {r["id"] for r in rules.catalog()}
    return [i for i in ids if i not in known]


def catalog_markdown(ids: list[str] | None = None) -> str:
    lines = ["| id | area | severity | title | fix | sources |", "|---|---|---|---|---|---|"]
    for r in _rules(ids):
        lines.append(
            f"| `{r['id']}` | {r['area']} | {r['severity']} | {r['title']} | {_fix(r['fix'])} "
            f"| {_sources_markdown(r['references'])} |"
        )
    return "\n".join(lines)


WIDTH = 100  # `gpufleet catalog` fits a terminal this wide (or the terminal, when narrower)
INDENT = "    "


def _fix_text(fix: dict) -> str:
    """``_fix`` without Markdown: plain text for a terminal."""
    return _fix(fix).replace("`", "")


def _wrap(text: str, width: int, indent: str = INDENT, later: str | None = None) -> list[str]:
    # URLs and paths are never broken: a word longer than the line gets a line of its own.
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=later if later is not None else indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def catalog_text(width: int = WIDTH, ids: list[str] | None = None) -> str:
    """The rules (or the rules ``ids``) as plain text, each line at most ``width`` columns (a URL longer than that
    stands alone on its line, moved left as far as it takes): the id, area, severity and title, then the rationale,
    the fix and the sources, indented."""
    out = []
    for r in _rules(ids):
        out.extend(_wrap(f"{r['id']:<13} {r['area']:<9} {r['severity']:<9} {r['title']}", width, "", " " * 34))
        out.extend(_wrap(r["rationale"], width))
        out.extend(_wrap(f"fix: {_fix_text(r['fix'])}", width, INDENT, INDENT + "     "))
        if r.get("policy_keys"):
            out.extend(_wrap(f"policy: {', '.join(r['policy_keys'])}", width, INDENT, INDENT + "        "))
        for ref in r["references"]:
            line = f"{INDENT}source: {ref['title']} <{ref['url']}>"
            if len(line) <= width:
                out.append(line)
            else:
                out.extend(_wrap(f"source: {ref['title']}", width, INDENT, INDENT + "        "))
                url = f"<{ref['url']}>"
                out.append(" " * max(0, min(len(INDENT) + 8, width - len(url))) + url)
        out.append("")
    return "\n".join(out).rstrip("\n")


def policy_text(width: int = WIDTH) -> str:
    """The policy keys as plain text within ``width`` columns: ``key: default`` (as a policy file writes it), then
    its meaning, indented."""
    out = []
    for path, default, doc in policy.documented():
        out.extend(_wrap(f"{path}: {json.dumps(default)}", width, "", INDENT))
        out.extend(_wrap(doc.replace("`", ""), width))
    return "\n".join(out)


def policy_markdown() -> str:
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for path, default, doc in policy.documented():
        lines.append(f"| `{path}` | `{json.dumps(default)}` | {doc} |")
    return "\n".join(lines)
