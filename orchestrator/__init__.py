"""The processes: elections, migrations, the sidecar, status, scenarios and the CLI.

It runs on `catalog`, the durable model, and its packages are layers (docs/design.md,
section 3).
"""
