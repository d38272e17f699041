"""End-to-end tests of network policies by name through the SDK against a real `lizard serve`
(conftest.py): a policy at create, sandbox.network.update and .log, the project's default, sync and
async, bad rules refused naming the field. The suite's server has no internet (--egress=none), so it records policies without
enforcing them; the Go e2e suite (e2e/network_test.go) tries their enforcement and each bypass."""

from __future__ import annotations

import asyncio

import pytest

from lizard import AsyncCodeSandbox, AsyncNetwork, CodeSandbox, ConflictError, InvalidArgumentError, Network, NetworkLogEntry


def test_network_policy_sync() -> None:
    with CodeSandbox.create(network={"default": "deny", "allow": ["PyPI.org", "*.pythonhosted.org"]}) as sb:
        info = sb.get_info()
        assert info.network == {"default": "deny", "allow": ["pypi.org", "*.pythonhosted.org"]}
        pol = sb.network.update(deny=["evil.test"], cut=True)
        assert pol["deny"] == ["evil.test"] and pol["allow"] == ["pypi.org", "*.pythonhosted.org"]
        assert sb.get_info().network["deny"] == ["evil.test"]
        log = sb.network.log()
        assert isinstance(log, list) and all(isinstance(e, NetworkLogEntry) for e in log)
        with pytest.raises(InvalidArgumentError, match=r"^network\.allow\[1\]"):
            sb.network.update(allow=["ok.test", "api.*.test"])
        with pytest.raises(InvalidArgumentError, match=r"^network\.inject\[0\]\.headers"):
            sb.network.update(inject=[{"domain": "api.test", "headers": {"Bad Header": "x"}}])
        assert sb.get_info().network["allow"] == ["pypi.org", "*.pythonhosted.org"]  # nothing applied
    with pytest.raises(InvalidArgumentError, match=r"^network\.default"):
        CodeSandbox.create(network={"default": "sometimes"})
    with pytest.raises(InvalidArgumentError, match="unknown field"):
        CodeSandbox.create(network={"alow": ["pypi.org"]})


def test_network_policy_async() -> None:
    async def main() -> None:
        async with AsyncCodeSandbox.create(network={"default": "allow", "deny": ["*.evil.test"]}) as sb:
            pol = await sb.network.update(default="deny", allow=["203.0.113.0/24"])
            assert pol == {"default": "deny", "allow": ["203.0.113.0/24"], "deny": ["*.evil.test"]}
            assert isinstance(await sb.network.log(), list)
            with pytest.raises(InvalidArgumentError, match=r"^network\.ports\[0\]"):
                await sb.network.update(ports=[70000])
        async with AsyncCodeSandbox.create() as plain:
            with pytest.raises(ConflictError, match="without a network policy"):
                await plain.network.update(default="deny")

    asyncio.run(main())


def test_project_default_policy() -> None:
    """The project's default policy is what a sandbox created without ``network`` gets; cleared, it is
    gone again. The suite shares one project, so the default is cleared whatever happens."""
    try:
        assert Network.get_default() is None
        pol = Network.set_default({"default": "deny", "allow": ["PyPI.org"]})
        assert pol == {"default": "deny", "allow": ["pypi.org"]}
        assert Network.get_default() == pol
        with CodeSandbox.create() as sb:
            assert sb.get_info().network == pol
        with CodeSandbox.create(network={"default": "allow", "deny": ["evil.test"]}) as own:
            assert own.get_info().network == {"default": "allow", "deny": ["evil.test"]}  # a create's own wins
        with pytest.raises(InvalidArgumentError, match=r"^network\.allow\[0\]"):
            Network.set_default({"allow": ["api.*.test"]})
        assert Network.get_default() == pol  # nothing applied
        with pytest.raises(InvalidArgumentError, match="unknown field"):
            Network.set_default({"alow": ["pypi.org"]})

        async def main() -> None:
            assert await AsyncNetwork.get_default() == pol
            assert await AsyncNetwork.set_default({"default": "deny"}) == {"default": "deny"}
            await AsyncNetwork.clear_default()
            assert await AsyncNetwork.get_default() is None

        asyncio.run(main())
        with CodeSandbox.create() as sb:
            assert sb.get_info().network is None
    finally:
        Network.clear_default()
