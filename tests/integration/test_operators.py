"""What an operator meets first (issue #35, "Operators"), against the real binary and docs/:
the admin CLI's variables exported in the shell, every command's --help and --version, the
banner's token command, the /metrics table and the /healthz schema held against live answers,
reason phrases on the status line, and the log_level error."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import ssl
import subprocess
from pathlib import Path

import pytest

import support
from support import HOST

DOCS = support.REPO / "docs"
# Where a command's flags may be documented: docs/, the README and the benchmark guide.
DOC_FILES = sorted(DOCS.glob("*.md")) + [support.REPO / "README.md", support.REPO / "bench" / "README.md"]
ADMIN_ENV = {"CALLING_ADMIN_KEY": "csk_not_a_real_key", "CALLING_ADMIN_URL": "http://127.0.0.1:1"}
SECRET = "operators-test-secret-0123456789abcdef"


def run(*args: str, env: dict | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([str(support.BINARY), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=clean_env(env))


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLING_")}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------
# CALLING_ADMIN_KEY / CALLING_ADMIN_URL exported in the operator's shell


def test_the_admin_cli_variables_do_not_stop_serve_token_migrate_or_config(start_server, tmp_path):
    data = tmp_path / "data"
    migrated = run("migrate", "--data-dir", str(data), env=ADMIN_ENV)
    assert migrated.returncode == 0, migrated.stderr
    config = run("config", "--data-dir", str(data), env=ADMIN_ENV)
    assert config.returncode == 0, config.stderr
    server = start_server(data_dir=data, env={**ADMIN_ENV, "CALLING_JWT_SECRET": SECRET})
    token = run("token", "--data-dir", str(data), "--room", "r", "--peer", "p",
                env={**ADMIN_ENV, "CALLING_JWT_SECRET": SECRET})
    assert token.returncode == 0, token.stderr
    status, _, _ = server.get_json("/v1/ice", token=token.stdout.strip())
    assert status == 200
    # A misspelt key is still refused: only the admin CLI's own names are exempt.
    typo = run("config", "--data-dir", str(data), env={"CALLING_ADMIN_KYE": "x"})
    assert typo.returncode == 78 and "unknown key 'admin_kye'" in typo.stderr, typo


# ---------------------------------------------------------------------------------------------
# --help, help COMMAND, --version


def global_commands() -> list[str]:
    usage = run("--help")
    assert usage.returncode == 0, usage
    return re.findall(r"^  ([a-z][a-z-]*)\s", usage.stdout, re.M)


# `calling-server X` where a command starts: a line (after `$ ` or VAR=value assignments), a path,
# a backtick or `$(`.
COMMAND_IN_DOCS = re.compile(r"(?:^[ \t]*(?:\$ )?(?:[A-Z_]+=\S+\s+)*|[/`(])calling-server ([a-z][a-z-]+)\b", re.M)


def documented_commands() -> set[str]:
    """Subcommands the docs run: `calling-server X` in code (fenced or inline), X a word."""
    commands = set()
    for path in DOC_FILES:
        text = path.read_text()
        code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`[^`\n]+`", text)
        for block in code:
            for match in COMMAND_IN_DOCS.finditer(block):
                commands.add(match.group(1))
    # The banner (`calling-server listening on …`) is output, not a command.
    commands.discard("listening")
    return commands


def documented(flag: str, docs: str, config_keys: set[str]) -> bool:
    return re.search(re.escape(flag) + r"(?![a-z-])", docs) is not None or flag[2:].replace("-", "_") in config_keys


def test_every_command_answers_help_with_its_own_documented_flags_before_reading_any_config():
    commands = global_commands()
    assert {"serve", "token", "migrate", "config", "apikey", "admin", "backup", "peer", "bench"} <= set(commands), commands
    missing = documented_commands() - set(commands)
    assert not missing, f"docs/ run commands the global --help does not list: {sorted(missing)}"
    docs = "\n".join(path.read_text() for path in DOC_FILES)
    config_keys = set(re.findall(r"^\| `([a-z0-9_]+)` \| `CALLING_", (DOCS / "configuration.md").read_text(), re.M))
    assert "data_dir" in config_keys
    # A configuration that cannot load and no admin key: help must not care.
    broken = {"CALLING_PORT": "not-a-port", "CALLING_CONFIG": "/nonexistent/config.json"}
    global_usage = run("--help").stdout
    for command in commands:
        if command == "help":
            continue
        for argv in ([command, "--help"], [command, "-h"], ["help", command]):
            result = run(*argv, env=broken)
            assert result.returncode == 0, f"{argv}: exit {result.returncode}: {result.stderr}"
            assert result.stdout.startswith(f"usage: calling-server {command}"), f"{argv}:\n{result.stdout}"
            assert result.stdout != global_usage
        own = run(command, "--help", env=broken).stdout
        undocumented = [flag for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", own)))
                        if not documented(flag, docs, config_keys)]
        assert not undocumented, f"`{command} --help` lists flags no doc mentions: {undocumented}"
    # An action's --help too (apikey and admin read their flags after the action).
    for argv in (["apikey", "create", "--help"], ["admin", "kick", "--help"]):
        result = run(*argv, env=broken)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: calling-server {argv[0]}"), result
    unknown = run("help", "nonsense")
    assert unknown.returncode == 64 and "unknown command 'nonsense'" in unknown.stderr


def test_version_prints_the_version_and_a_commit_of_this_repository():
    result = run("--version", env={"CALLING_PORT": "not-a-port"})
    assert result.returncode == 0, result
    match = re.fullmatch(r"calling-server (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(?:-dirty)?|unknown)\)\n", result.stdout)
    assert match, result.stdout
    commit = match.group(2)
    if commit != "unknown":
        found = subprocess.run(["git", "-C", str(support.REPO), "cat-file", "-e", commit.removesuffix("-dirty") + "^{commit}"],
                               capture_output=True)
        assert found.returncode == 0, f"{commit} is no commit of this repository"


def test_make_records_the_checked_out_commit_for_the_build():
    header = support.REPO / "Sources" / "CBuildInfo" / "build_commit.h"
    made = subprocess.run(["make", "-s", "-C", str(support.REPO), "build-info"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    head = subprocess.run(["git", "-C", str(support.REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert re.fullmatch(rf'#define CALLING_BUILD_COMMIT "{head}(-dirty)?"\n', header.read_text()), header.read_text()
    ignored = subprocess.run(["git", "-C", str(support.REPO), "check-ignore", "-q", str(header)])
    assert ignored.returncode == 0, "the generated header must stay out of git"


# ---------------------------------------------------------------------------------------------
# The banner


def test_the_banners_token_command_carries_the_config_and_mints_a_token_the_server_accepts(start_server, tmp_path):
    secret_file = tmp_path / "jwt-secret"
    secret_file.write_text(SECRET + "\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"jwt_secret_file": str(secret_file)}))
    server = start_server(config=config)
    line = re.search(r"^mint a token: (.*)$", server.stdout_path.read_text(), re.M)
    assert line, server.stdout_path.read_text()
    argv = shlex.split(line.group(1))
    assert argv[:2] == [str(support.BINARY), "token"], argv
    assert argv[argv.index("--config") + 1] == str(config), argv
    minted = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=clean_env())
    assert minted.returncode == 0, minted.stderr
    status, _, _ = server.get_json("/v1/ice", token=minted.stdout.strip())
    assert status == 200


# ---------------------------------------------------------------------------------------------
# /metrics and /healthz against docs/


@pytest.fixture
def everything_on(start_server, tmp_path):
    """A server with TLS, webhooks and cluster mode (Redis unreachable: degraded) switched on, so
    every conditional metric and the cluster part of /healthz are live."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                           "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    context = ssl.create_default_context(cafile=str(cert))
    return start_server(env={"CALLING_WEBHOOK_SECRET": "operators-webhook-secret-0123456789"}, ssl_context=context,
                        tls_cert_file=cert, tls_key_file=key, webhook_urls="http://127.0.0.1:1/hooks",
                        cluster_redis_url="redis://127.0.0.1:1", node_id="ops-node")


def documented_metrics() -> dict[str, str]:
    text = (DOCS / "protocol.md").read_text()
    section = text[text.index("\n## /metrics"):text.index("\n## Presence channel")]
    return dict(re.findall(r"^\| `(calling_[a-z0-9_]+)` \| (\w+) \|", section, re.M))


def test_the_metrics_table_lists_exactly_the_live_metrics_with_their_types(everything_on):
    status, _, body = everything_on.http("GET", "/metrics")
    assert status == 200
    live = dict(re.findall(r"^# TYPE (\S+) (\w+)$", body.decode(), re.M))
    docs = documented_metrics()
    assert sorted(set(live) - set(docs)) == [], "live metrics missing from docs/protocol.md's /metrics table"
    assert sorted(set(docs) - set(live)) == [], "docs/protocol.md documents metrics the server does not expose"
    assert {name: docs[name] for name in live} == live, "types differ between the table and # TYPE"


def yaml_block(lines: list[str], start: int) -> list[str]:
    """Lines of the YAML block that starts at lines[start] (its key line), down to the next line
    indented as little as it."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return lines[start:end]


def parse_flow(text: str):
    """A YAML flow value of this file's schemas (`{type: string, enum: [a, b]}`, quoted strings)."""
    pos = 0

    def skip() -> None:
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1

    def scalar(stops: str):
        nonlocal pos
        skip()
        if text[pos] == '"':
            end = text.index('"', pos + 1)
            word, pos = text[pos + 1:end], end + 1
            return word
        start = pos
        while pos < len(text) and text[pos] not in stops:
            pos += 1
        word = text[start:pos].strip()
        return {"true": True, "false": False, "null": None}.get(word, int(word) if word.isdigit() else word)

    def value():
        nonlocal pos
        skip()
        if text[pos] in "{[":
            closing, items = ("}", {}) if text[pos] == "{" else ("]", [])
            pos += 1
            while True:
                skip()
                if text[pos] == closing:
                    pos += 1
                    return items
                if closing == "}":
                    key = scalar(":")
                    pos += 1  # the colon
                    items[key] = value()
                else:
                    items.append(value())
                skip()
                if text[pos] == ",":
                    pos += 1
        return scalar(",]}")

    return value()


def parse_schema(lines: list[str]) -> dict:
    """The block-style schema subset docs/openapi.yaml uses: nested maps, flow maps and lists,
    folded descriptions ignored."""
    root: dict = {}
    stack = [(-1, root)]
    for line in lines:
        if not line.strip() or line.strip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if not isinstance(parent, dict):
            continue
        value = value.strip()
        if not value or value in (">-", "|"):
            parent[key] = {}
            stack.append((indent, parent[key]))
        elif value.startswith(("{", "[")):
            parent[key] = parse_flow(value)
        else:
            parent[key] = {"true": True, "false": False}.get(value, value)
    return root


def healthz_schema() -> dict:
    lines = (DOCS / "openapi.yaml").read_text().splitlines()
    get = yaml_block(lines, lines.index("  /healthz:") + 1)
    schema_at = next(i for i, line in enumerate(get) if line.strip() == "schema:")
    return parse_schema(get[schema_at + 1:])  # the schema's own keys, one level in


def check(value, schema: dict, where: str) -> list[str]:
    """Problems of `value` against `schema` (type, enum, nullable, required; a property the
    schema does not name is a problem: every field the server sends must be documented)."""
    if value is None:
        return [] if schema.get("nullable") is True else [f"{where} is null"]
    kinds = {"object": dict, "string": str, "integer": int, "boolean": bool, "array": list}
    kind = schema.get("type")
    if kind in kinds and not isinstance(value, kinds[kind]) or (kind == "integer" and isinstance(value, bool)):
        return [f"{where}: {value!r} is not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} not in {schema['enum']}"]
    problems = []
    if kind == "object":
        properties = schema.get("properties", {})
        problems += [f"{where}.{name} is required but absent" for name in schema.get("required", []) if name not in value]
        for name, item in value.items():
            if name not in properties:
                problems.append(f"{where}.{name} is not documented")
            else:
                problems += check(item, properties[name], f"{where}.{name}")
    return problems


def test_healthz_answers_as_openapi_yaml_says_plain_and_in_a_degraded_cluster(server, everything_on):
    schema = healthz_schema()
    assert schema.get("type") == "object", schema
    for running in (server, everything_on):
        status, _, body = running.http("GET", "/healthz")
        assert status == 200
        answer = json.loads(body)
        assert check(answer, schema, "healthz") == [], (answer, schema)
    assert answer["status"] == "degraded" and answer["cluster"]["redis"] == "down", answer


# ---------------------------------------------------------------------------------------------
# Status lines and the log_level error


def status_line(port: int, request: bytes) -> bytes:
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


def test_201_and_204_carry_their_reason_phrases(server):
    key = run("apikey", "create", "--name", "ops", "--data-dir", str(server.data_dir)).stdout.strip()
    assert key.startswith("csk_"), key
    body = json.dumps({"room_id": "r", "peer_id": "p"}).encode()
    created = status_line(server.port, b"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key.encode()
                          + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                          + b"\r\nConnection: close\r\n\r\n" + body)
    assert created == b"HTTP/1.1 201 Created", created
    preflight = status_line(server.port, b"OPTIONS /v1/ice HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                            b"Access-Control-Request-Method: GET\r\nConnection: close\r\n\r\n")
    assert preflight == b"HTTP/1.1 204 No Content", preflight
    ok = status_line(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert ok == b"HTTP/1.1 200 OK", ok


def test_an_unknown_log_level_lists_the_valid_ones(tmp_path):
    result = run("config", "--data-dir", str(tmp_path), "--log-level", "verbose")
    assert result.returncode == 78, result
    assert "log_level: unknown level 'verbose'; use one of trace, debug, info, notice, warning, error, critical" \
        in result.stderr, result.stderr


def test_a_kicked_token_stays_refused_after_a_restart(server):
    """The ban of a kicked token is in the store (`token_bans`), not only in the hub: a restarted
    server refuses it (docs/protocol.md, "Admin API")."""
    import asyncio

    key = run("apikey", "create", "--name", "ops", "--scope", "admin", "--data-dir", str(server.data_dir)).stdout.strip()
    token = server.token("r1", "bob")

    async def body():
        bob = await support.Peer.connect(server, token, "bob")
        status, _, raw = await asyncio.get_running_loop().run_in_executor(
            None, lambda: server.http("POST", "/v1/admin/rooms/r1/peers/bob/kick", headers={"X-API-Key": key}))
        assert status == 200, raw
        assert (await bob.wait_closed(5))[0] == 4403

    support.run(body(), timeout=15)
    server.kill()
    server.start()
    status, _, raw = support.raw_upgrade(server.port, f"/v1/ws?token={token}")
    assert status == 403 and json.loads(raw)["code"] == "kicked", raw
    status, _, _ = support.raw_upgrade(server.port, f"/v1/ws?token={server.token('r1', 'bob')}")
    assert status == 101, "another token of the same peer"
