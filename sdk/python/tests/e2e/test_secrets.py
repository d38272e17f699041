"""End-to-end tests of the secret store against a real `lizard serve` (conftest.py): set, list (names and
times, never values), replace, delete, sync and async; bad names and oversized values refused with the
rule they break; a network policy injecting one."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from lizard import AsyncSecret, CodeSandbox, InvalidArgumentError, NotFoundError, Secret


def _name() -> str:
    return f"PY_{uuid.uuid4().hex[:8].upper()}"


def test_secret_set_list_replace_delete() -> None:
    name = _name()
    first = Secret.set(name, "sk-py-0001", hosts=["api.example.test"])
    assert first.hosts == ["api.example.test"] and first.allow_http is False
    assert first.name == name and first.created_at is not None
    listed = {s.name: s for s in Secret.list()}
    assert name in listed
    assert "sk-py-0001" not in json.dumps([vars(s) for s in listed.values()], default=str)
    again = Secret.set(name, "sk-py-0002", hosts=["API.example.test.", "*.example.org"], allow_http=True)
    assert again.hosts == ["api.example.test", "*.example.org"] and again.allow_http is True
    assert again.created_at == first.created_at and again.updated_at >= first.updated_at
    Secret.delete(name)
    assert name not in [s.name for s in Secret.list()]
    with pytest.raises(NotFoundError):
        Secret.delete(name)


def test_secret_bad_input() -> None:
    with pytest.raises(InvalidArgumentError, match="secret name"):
        Secret.set("not-an-identifier", "v", hosts=["api.example.test"])
    with pytest.raises(InvalidArgumentError, match="65536"):
        Secret.set(_name(), "x" * (64 * 1024 + 1), hosts=["api.example.test"])
    with pytest.raises(InvalidArgumentError, match="NUL, CR or LF"):
        Secret.set(_name(), "two\nlines", hosts=["api.example.test"])
    with pytest.raises(InvalidArgumentError, match=r"^hosts\[0\]"):
        Secret.set(_name(), "v", hosts=["203.0.113.7"])


def test_async_secret() -> None:
    async def main() -> None:
        name = _name()
        info = await AsyncSecret.set(name, "sk-async", hosts=["api.example.test"])
        assert info.hosts == ["api.example.test"]
        assert info.name == name
        assert name in [s.name for s in await AsyncSecret.list()]
        await AsyncSecret.delete(name)
        with pytest.raises(NotFoundError):
            await AsyncSecret.delete(name)

    asyncio.run(main())


def test_policy_injecting_a_secret() -> None:
    """A policy naming the project's secret: the sandbox trusts its own egress CA (this suite's server
    has no internet, so nothing goes out; e2e/secrets_inject_test.go follows a request to an upstream) and
    holds no value; a policy naming a secret the project lacks is refused naming the header."""
    name = _name()
    value = "sk-py-" + uuid.uuid4().hex
    Secret.set(name, value, hosts=["api.example.test"])
    inject = [{"domain": "api.example.test", "headers": {"Authorization": "Bearer {{ secrets.%s }}" % name}}]
    try:
        with CodeSandbox.create(network={"default": "deny", "allow": ["api.example.test"], "inject": inject}) as sb:
            bundle = sb.process.exec("cat /etc/ssl/certs/ca-certificates.crt").stdout
            assert "BEGIN lizard egress CA" in bundle
            assert sb.run_code("import os; print(os.environ.get('NODE_EXTRA_CA_CERTS'))").stdout == (
                "/usr/local/share/ca-certificates/lizard-egress-ca.crt\n")
            env = sb.process.exec("env").stdout
            assert value not in env and value not in bundle
            # Removing the rules removes the CA.
            sb.network.update(inject=[])
            assert "BEGIN lizard egress CA" not in sb.process.exec("cat /etc/ssl/certs/ca-certificates.crt").stdout
        with pytest.raises(InvalidArgumentError, match=r"^network\.inject\[0\]\.headers\[Authorization\] names secret"):
            CodeSandbox.create(network={"default": "deny", "inject": [
                {"domain": "api.example.test", "headers": {"Authorization": "{{ secrets.NOT_A_SECRET_OF_MINE }}"}}]})
        # A rule aiming it at a host it may not be sent to: the red team's echo server.
        with pytest.raises(InvalidArgumentError, match=f'secret "{name}" for echo.attacker.test'):
            CodeSandbox.create(network={"default": "allow", "inject": [
                {"domain": "echo.attacker.test", "headers": {"Authorization": "{{ secrets.%s }}" % name}}]})
    finally:
        Secret.delete(name)
