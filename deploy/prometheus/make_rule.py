"""Write deploy/kubernetes/prometheus-rule.yaml from deploy/prometheus/alerts.yaml: the same rules
as a Prometheus Operator ``PrometheusRule`` (run by ``make prometheus-rule``; a test keeps the two
equal, so the rules have one home)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALERTS = HERE / "alerts.yaml"
RULE = HERE.parent / "kubernetes" / "prometheus-rule.yaml"

HEADER = """\
# Generated from deploy/prometheus/alerts.yaml by `make prometheus-rule`: edit that file.
# The catalog-upgrade alerts for the Prometheus Operator; runbooks in docs/runbooks.md.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: catalog-upgrade
  labels:
    app.kubernetes.io/name: catalog-upgrade
spec:
"""


def manifest(alerts: str) -> str:
    """The manifest for the text of alerts.yaml (its comments dropped, its rules indented)."""
    lines = alerts.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("groups:"))
    body = [f"  {line}" if line.strip() else "" for line in lines[start:]]
    return HEADER + "\n".join(body) + "\n"


if __name__ == "__main__":
    RULE.write_text(manifest(ALERTS.read_text()))
    sys.stdout.write(f"wrote {RULE}\n")
