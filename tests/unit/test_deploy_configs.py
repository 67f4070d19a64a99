"""The container and Kubernetes configurations are exercised here, since no Docker engine
runs on the development machines: every setting they pass must be one `rowgate serve`
accepts, the security-relevant choices (non-root, Spark on loopback in the sidecar,
TLS/token to the upstream) must stay as documented, and what the image and the manifests
name (paths, entrypoint, health services, dependencies' versions) must exist."""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import tomllib
from importlib import metadata, util
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rowgate.config import ServeConfig, add_serve_arguments, config_from_args
from rowgate.health import LIVENESS, READINESS_SERVICES, SERVICES

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
    assert '"$pyspark_dir/jars"' in dockerfile  # the Spark jars are not shipped in the proxy image


# -- probes, image and compose fit for production (issue #15) ----------------------------------

REPO = DOCKER.parent


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def build_args(text: str) -> dict[str, str]:
    return dict(rest.partition("=")[::2] for word, rest in instructions(text) if word == "ARG")


def probe_command(command: list[str]) -> tuple[str, str]:
    """(module, service) of a `python -m rowgate.probe --service X` health check."""
    assert command[1:3] == ["-m", "rowgate.probe"], command
    assert util.find_spec("rowgate.probe") is not None
    return command[2], command[command.index("--service") + 1]


def test_the_python_version_is_set_in_one_place_and_is_an_exact_release():
    text = dockerfile()
    args = build_args(text)
    version = args["PYTHON_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"the base is pinned to an exact patch release, not {version!r}"
    # The image runs the minor version the suite runs on, within requires-python.
    assert tuple(int(p) for p in version.split(".")[:2]) == sys.version_info[:2]
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Requirement(f"python{requires}").specifier.contains(version)
    # The Python stages start from the official image of that version unless BASE_IMAGE names
    # another base (the suite's offline Debian one); the other stages are scratch (wheels).
    froms = [rest for word, rest in instructions(text) if word == "FROM"]
    python_stages = [rest for rest in froms if "PYTHON_VERSION" in rest]
    assert len(python_stages) >= 2
    assert all(
        rest.startswith("${BASE_IMAGE:-python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE}${BASE_DIGEST}}") for rest in python_stages
    )
    assert all(rest in python_stages or rest.startswith(("scratch", "${WHEELS:-")) for rest in froms)
    # No other line spells a Python version, so no path can go stale when it changes.
    for word, rest in instructions(text):
        if word != "ARG":
            assert not re.search(r"python\d\.\d+|site-packages|\b3\.\d+\.\d+\b", rest), (word, rest)


def test_the_image_installs_with_the_constraints_file():
    text = dockerfile()
    assert "PIP_CONSTRAINT=/src/constraints.txt" in text
    copies = [rest.split() for word, rest in instructions(text) if word == "COPY" and not rest.startswith("--from")]
    copied = {Path(src).name for *sources, _ in copies for src in sources}
    assert "constraints.txt" in copied


def test_the_image_entrypoint_and_healthcheck_exist_in_the_package():
    text = dockerfile()
    entry = json.loads(next(rest for word, rest in instructions(text) if word == "ENTRYPOINT"))
    assert entry == ["/opt/rowgate/bin/rowgate", "serve"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["rowgate"].partition(":")
    assert module == "rowgate.cli" and callable(getattr(__import__(module, fromlist=[function]), function))
    from rowgate.cli import main

    with pytest.raises(SystemExit) as exit_info:  # `rowgate serve --help` parses: the subcommand exists
        main(["serve", "--help"])
    assert exit_info.value.code == 0

    healthcheck = next(rest for word, rest in instructions(text) if word == "HEALTHCHECK")
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[0] == "/opt/rowgate/bin/python"
    # The image's own check is liveness: an orchestrator restarting unhealthy containers
    # must not restart every replica for a policy store or Spark outage.
    assert probe_command(command)[1] == LIVENESS
    # Paths the image uses live under the venv it builds.
    assert "python -m venv /opt/rowgate" in text


def dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last pattern that matches decides; `!` re-includes."""
    allowed = True
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/").removeprefix("**/")
        parts = Path(path).parts
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))] + list(parts)
        if any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates):
            allowed = negate
    return allowed


def test_the_build_context_holds_what_the_image_copies_and_nothing_else():
    for word, rest in instructions(dockerfile()):
        if word == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (REPO / source).exists(), source
                assert dockerignore_allows(source), f"{source} is copied but .dockerignore leaves it out"
    assert dockerignore_allows("proxy/rowgate/probe.py")
    for private in (
        ".venv/bin/python",
        "tests/conftest.py",
        "docker/tokens.example.yaml",
        ".git/config",
        ".rowgate/policies.db",
        "proxy/rowgate/__pycache__/app.cpython-311.pyc",
    ):
        assert not dockerignore_allows(private), private


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_waits_for_healthy_dependencies_and_checks_rowgate_readiness():
    services = compose()["services"]
    rowgate = services["rowgate"]
    for name, condition in rowgate["depends_on"].items():
        assert condition == {"condition": "service_healthy"}, name
        assert "healthcheck" in services[name], f"{name} has no healthcheck to wait for"
    _, service = probe_command(rowgate["healthcheck"]["test"][1:])
    assert rowgate["healthcheck"]["test"][0] == "CMD"
    assert service in READINESS_SERVICES  # healthy = ready: Spark accepts the token, policies current


def compose_token_default() -> str:
    command = compose()["services"]["spark"]["command"]
    setting = next(str(c) for c in command if str(c).startswith("spark.connect.authenticate.token="))
    match = re.fullmatch(r"spark\.connect\.authenticate\.token=\$\{SPARK_CONNECT_TOKEN:-([^}]+)\}", setting)
    assert match, setting
    return match.group(1)


def test_the_token_compose_spark_requires_is_in_every_documented_command():
    token = compose_token_default()
    upstream = compose()["services"]["rowgate"]["environment"]["ROWGATE_UPSTREAM"]
    assert upstream.endswith(";token=${SPARK_CONNECT_TOKEN:-" + token + "}")
    # The suite against compose's Spark (published on 15003): the compose file's own note and
    # the README say the same command, with the token.
    documented = [
        line for line in (DOCKER / "compose.yaml").read_text().splitlines() if "15003" in line and "TEST_UPSTREAM" in line
    ]
    documented += [line for line in (REPO / "README.md").read_text().splitlines() if "sc://localhost:15003" in line]
    assert documented
    for line in documented:
        assert re.search(r";token=(\$\{SPARK_CONNECT_TOKEN:-" + re.escape(token) + r"\}|" + re.escape(token) + r")", line), (
            f"compose's Spark refuses calls without its token; this documented command lacks it: {line.strip()}"
        )


@pytest.mark.parametrize("manifest", ["sidecar.yaml", "gateway.yaml"])
def test_kubernetes_probes_ask_liveness_and_readiness_apart(manifest):
    deployment = next(d for d in load_all(DOCKER / "k8s" / manifest) if d["kind"] == "Deployment")
    rowgate = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "rowgate")
    ports = {p["containerPort"] for p in rowgate["ports"] if p["name"] == "grpc"}
    readiness, liveness = rowgate["readinessProbe"]["grpc"], rowgate["livenessProbe"]["grpc"]
    assert readiness["port"] in ports and liveness["port"] in ports
    # A store or Spark outage turns readiness NOT_SERVING; liveness must not follow it, or
    # Kubernetes restarts every replica at once.
    assert liveness["service"] == LIVENESS
    assert readiness["service"] in READINESS_SERVICES and readiness["service"] != LIVENESS
    assert {liveness["service"], readiness["service"]} <= set(SERVICES)


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt pins exact versions only: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_every_runtime_dependency_within_its_declared_range():
    pins = _constraints()
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    needed: dict[str, Requirement] = {}

    def walk(req: Requirement, extras: set[str]) -> None:
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            return
        key = canonicalize_name(req.name)
        new_extras = set(req.extras) - set(getattr(needed.get(key), "extras", ()))
        if key in needed and not new_extras:
            return
        needed[key] = req
        for child in metadata.distribution(req.name).requires or []:
            walk(Requirement(child), set(req.extras))

    for text in declared:
        walk(Requirement(text), set())
    for key, req in needed.items():
        assert key in pins, f"{req} (needed by `pip install .`) is not pinned in constraints.txt"
        assert req.specifier.contains(pins[key], prereleases=True), f"constraints.txt pins {key}=={pins[key]}, outside {req}"
    assert "setuptools" in pins  # what builds rowgate in the image is pinned too
