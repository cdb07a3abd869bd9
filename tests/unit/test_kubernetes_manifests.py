"""deploy/kubernetes against the real CLI and HTTP server (no cluster here): every command line
parses with the real `catalog-upgrade` options, every environment variable is one it reads,
every probe is a route of the sidecar on the port it listens on, and the token file lies in the
mounted Secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from werkzeug.exceptions import MethodNotAllowed, NotFound

from catalog.consensus.budget import JUTE_MAXBUFFER_ENV
from orchestrator.cli import main
from orchestrator.sidecar.api import ROUTES
from orchestrator.zookeeper.clients import CONNECT_TIMEOUT_VAR

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# Variables the code reads itself, not through a click option.
READ_DIRECTLY = {CONNECT_TIMEOUT_VAR, JUTE_MAXBUFFER_ENV}


def documents() -> list[dict[str, Any]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["spec"]["template"]["spec"]


def tool_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for spec in pod_specs(docs):
        for container in spec["containers"]:
            if container.get("command") == ["catalog-upgrade"]:
                yield spec, container


def parse(args: list[str]) -> click.Context:
    """The context the real CLI builds for ``args`` (click raises on any unknown or bad one)."""
    root = click.Context(main, info_name="catalog-upgrade")
    name, *rest = args
    command = main.get_command(root, name)
    assert command is not None, f"catalog-upgrade has no command {name}"
    return command.make_context(name, rest, parent=root)


def envvars() -> set[str]:
    """Every environment variable an option of the CLI reads (its commands are loaded on first
    use, so each is asked for by name, whatever this worker loaded before)."""
    found: set[str] = set()
    commands: list[tuple[click.Command, click.Context]] = [(main, click.Context(main))]
    while commands:
        command, ctx = commands.pop()
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                found.add(envvar)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                commands.append((sub, click.Context(sub, parent=ctx, info_name=name)))
    return found


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    loaded = documents()
    assert {d["kind"] for d in loaded} >= {"Deployment", "Job", "Secret", "ConfigMap"}
    return loaded


def test_every_command_line_parses_with_the_real_cli(docs: list[dict[str, Any]]) -> None:
    commands = {parse(c["args"]).info_name for _, c in tool_containers(docs)}
    assert commands == {"sidecar", "promote"}


def test_every_environment_variable_is_one_the_tool_reads(docs: list[dict[str, Any]]) -> None:
    known = envvars() | READ_DIRECTLY
    config = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    containers = [c for _, c in tool_containers(docs)]
    assert containers and any(c.get("env") for c in containers), "the manifests set variables"
    for container in containers:
        referenced = {a[2:-1] for a in container["args"] if a.startswith("$(")}
        for var in container.get("env", []):
            name = var["name"]
            assert name in known or name in referenced, f"{name} is read by nothing"
            ref = var.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                assert ref["key"] in config[ref["name"]], f"{ref} is not in the ConfigMap"


def test_probes_are_routes_on_the_port_the_sidecar_listens_on(docs: list[dict[str, Any]]) -> None:
    seen = 0
    for spec, container in tool_containers(docs):
        context = parse(container["args"])
        if context.info_name != "sidecar":
            continue
        seen += 1
        port = int(context.params["http"].rpartition(":")[2])
        assert port in {p["containerPort"] for p in container["ports"]}
        for probe in ("livenessProbe", "readinessProbe"):
            get = container[probe]["httpGet"]
            assert get["port"] == port, probe
            try:
                endpoint, _ = ROUTES.bind("sidecar").match(get["path"], method="GET")
            except (NotFound, MethodNotAllowed):
                pytest.fail(f"{probe} {get['path']} is no GET route of the sidecar")
            assert endpoint in ("healthz", "readyz")
        assert container["lifecycle"]["preStop"], "a clean step-down needs the preStop hook"
        assert spec["terminationGracePeriodSeconds"] >= 10
    assert seen


def mounted_secret(
    docs: list[dict[str, Any]], spec: dict[str, Any], container: dict[str, Any], path: Path
) -> str:
    """The value a container reads at ``path``: a key of a Secret mounted at its directory."""
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = next(m for m in container["volumeMounts"] if path.parent == Path(m["mountPath"]))
    secret = secrets[volumes[mount["name"]]["secret"]["secretName"]]
    value: str = secret.get("stringData", secret.get("data", {}))[path.name]
    return value


def test_the_token_file_is_in_the_mounted_secret(docs: list[dict[str, Any]]) -> None:
    checked = 0
    for spec, container in tool_containers(docs):
        context = parse(container["args"])
        token = context.params.get("http_token_file")
        if token is None:
            continue
        checked += 1
        assert mounted_secret(docs, spec, container, Path(token))
        assert context.params["http"].startswith("0.0.0.0"), "beyond loopback: the token is needed"
    assert checked, "a sidecar of the manifests takes a token file"


def test_the_promote_job_promotes_the_sidecars_generation(docs: list[dict[str, Any]]) -> None:
    contexts = [parse(c["args"]) for _, c in tool_containers(docs)]
    sidecar = {c.params["deploy_generation"] for c in contexts if c.info_name == "sidecar"}
    promote = {c.params["deploy_generation"] for c in contexts if c.info_name == "promote"}
    assert promote == sidecar == {2}


def test_zookeeper_credentials_come_from_a_mounted_secret(docs: list[dict[str, Any]]) -> None:
    """Every container names its ZooKeeper credentials as file:PATH in a mounted Secret that
    holds that key with a USER:PASSWORD value: never the secret itself in the manifest."""
    seen = 0
    for spec, container in tool_containers(docs):
        for var in container.get("env", []):
            if var["name"] not in ("CATALOG_UPGRADE_ZK_AUTH", "CATALOG_UPGRADE_ZK_READ_AUTH"):
                continue
            kind, _, where = var["value"].partition(":")
            assert kind == "file", var
            value = mounted_secret(docs, spec, container, Path(where))
            user, sep, password = value.partition(":")
            assert user and sep and password
            seen += 1
    assert seen == 3  # the sidecar's owner and reader, the Job's owner


def test_the_prometheus_rule_manifest_is_made_from_the_alert_rules() -> None:
    """deploy/kubernetes/prometheus-rule.yaml holds exactly deploy/prometheus/alerts.yaml's
    rules (``make prometheus-rule`` writes it)."""
    import runpy

    prometheus = DEPLOY.parent / "prometheus"
    make = runpy.run_path(str(prometheus / "make_rule.py"))
    expected = make["manifest"]((prometheus / "alerts.yaml").read_text())
    assert (DEPLOY / "prometheus-rule.yaml").read_text() == expected
    rule = yaml.safe_load(expected)
    alerts = yaml.safe_load((prometheus / "alerts.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["spec"] == alerts


def test_every_alert_names_a_runbook_section_and_every_section_an_alert() -> None:
    """Each rule's ``runbook`` is a section of docs/runbooks.md, and the runbooks have one
    section per alert (what the page promises)."""
    import re

    prometheus = DEPLOY.parent / "prometheus"
    alerts = yaml.safe_load((prometheus / "alerts.yaml").read_text())
    named = [
        rule["annotations"]["runbook"]
        for group in alerts["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    runbooks = (DEPLOY.parents[1] / "docs" / "runbooks.md").read_text()
    sections = re.findall(r"^## (\S+)$", runbooks, flags=re.MULTILINE)
    assert all(n.startswith("docs/runbooks.md#") for n in named), named
    assert sorted(n.split("#", 1)[1] for n in named) == sorted(sections)
