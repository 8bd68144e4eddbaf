# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Controller-side report writers for gpufleet audit reports (schema ``gpufleet.report/v1``).

Shared by the ``gpufleet.tuning`` action plugin and the ``gpufleet`` CLI. Every import inside this package is
relative, so it works as ``ansible_collections.gpufleet.tuning.plugins.plugin_utils.report`` and from any other
place the collection's ``plugins`` tree is put on ``sys.path``. Python 3.10+, stdlib + jinja2 (only ``html``
needs jinja2); the imports outside the package are ``module_utils/text.py``, the single cleaner of host strings
that the hosts' watch uses as well, ``module_utils/summary.py``, the one count of rule results that a host's own
summary uses too, and ``module_utils/prometheus_text.py``, the one Prometheus text writer that the watch uses too
(all three stdlib only).

- ``schema``: ``SCHEMA``, ``validate(report)``, ``summarize(hosts)``, the matrix cell logic
- ``html``: ``render_html(report)`` (self-contained page)
- ``junit``: ``render_junit(report)``
- ``prometheus``: ``render_prometheus(report)`` (node_exporter textfile)
- ``terminal``: ``render_terminal(report, color=False)``
- ``diff``: ``diff_reports(old, new)``, ``render_diff(d)``
- ``writer``: ``check_writable(out_dir)``, ``write_all(report, out_dir, stamp=None)``
"""

from __future__ import annotations

from .schema import AREAS, SCHEMA, SEVERITIES, STATUSES, summarize, validate

__all__ = ["AREAS", "SCHEMA", "SEVERITIES", "STATUSES", "summarize", "validate"]
