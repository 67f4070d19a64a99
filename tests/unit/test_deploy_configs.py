"""The container and Kubernetes configurations are exercised here, since no Docker engine
runs on the development machines: every setting they pass must be one `rowgate serve`
accepts, and the security-relevant choices (non-root, Spark on loopback in the sidecar,
TLS/token to the upstream) must stay as documented."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from rowgate.config import ServeConfig, add_serve_arguments, config_from_args

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def parse_config(environ: dict[str, str], config_file: Path | None = None) -> ServeConfig:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--config", str(config_file)] if config_file else [])
    return config_from_args(args, environ)


def test_compose_settings_are_accepted_by_rowgate():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    env = {k: str(v) for k, v in compose["services"]["rowgate"]["environment"].items()}
    env.setdefault("ROWGATE_LISTEN", "0.0.0.0:15002")  # from the image
    config = parse_config(env)
    assert config.upstream.startswith("sc://spark:15002/;token=")
    assert config.policy_store.startswith("postgresql://")
    assert config.identity_sources == ["token"] and config.require_auth
    tokens = yaml.safe_load((DOCKER / "tokens.example.yaml").read_text())
    assert {t["principal"] for t in tokens} >= {"user:admin@example.com"}


def test_compose_spark_requires_a_token():
    command = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["spark"]["command"]
    assert any(str(c).startswith("spark.connect.authenticate.token=") for c in command)
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in command


@pytest.mark.parametrize("manifest, config_map", [("sidecar.yaml", "rowgate-sidecar"), ("gateway.yaml", "rowgate-gateway")])
def test_kubernetes_config_maps_are_accepted_by_rowgate(tmp_path, manifest, config_map):
    docs = load_all(DOCKER / "k8s" / manifest)
    data = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map)["data"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(data["config.yaml"])
    config = parse_config({}, config_file)
    assert config.require_auth and config.identity_sources == ["jwt"]
    assert config.listen == "0.0.0.0:15002"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    rowgate = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "rowgate")
    assert rowgate["readinessProbe"]["grpc"]["port"] == 15002
    assert rowgate["securityContext"]["runAsNonRoot"] is True


def test_sidecar_spark_listens_on_loopback_only():
    docs = load_all(DOCKER / "k8s" / "sidecar.yaml")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert "spark.connect.grpc.binding.address=127.0.0.1" in containers["spark-connect"]["command"]
    assert "ports" not in containers["spark-connect"]
    upstream = next(e["value"] for e in containers["rowgate"]["env"] if e["name"] == "ROWGATE_UPSTREAM")
    assert upstream.startswith("sc://127.0.0.1:")


def test_image_is_multi_stage_and_non_root():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert dockerfile.count("\nFROM ") + dockerfile.startswith("FROM ") >= 2
    assert "USER 10001" in dockerfile
    assert "pyspark/jars" in dockerfile  # the Spark jars are not shipped in the proxy image
