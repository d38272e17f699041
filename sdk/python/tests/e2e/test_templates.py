"""A custom template (docs/templates.md) built with `lizard template build` from a recipe adding a pinned
pure-Python wheel and a file, then used through the SDK: `CodeSandbox.create(template=...)`."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import lizard
from lizard import AsyncCodeSandbox, AsyncTemplate, CodeSandbox, Template, TemplateBuildError

# bin/lizard, as conftest.py finds it.
BIN = Path(os.environ.get("LIZARD_TEST_BIN_DIR") or Path(__file__).resolve().parents[4] / "bin") / "lizard"
NAME = "sdk-py-tpl"
RECIPE: Dict[str, Any] = {}


@pytest.fixture(scope="module")
def custom_template(lizard_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    recipe_dir = tmp_path_factory.mktemp("recipe")
    (recipe_dir / "data").mkdir()
    (recipe_dir / "data" / "greeting.txt").write_text("hello from the python sdk recipe\n")
    # A nonce keeps this build apart from every other run's in the shared template cache, so that
    # deleting it at the end cannot take another test's build away.
    nonce = secrets.token_hex(6)
    (recipe_dir / "recipe.yaml").write_text(f"""\
pip:
  - six==1.16.0
files:
  - src: data/greeting.txt
    dest: /home/user/greeting.txt
env:
  TEMPLATE_NONCE: "{nonce}"
  GREETING: hi
workdir: /home/user/project
""")
    # The same recipe in the SDK's form (test_sdk_build_is_cached).
    RECIPE.update({"pip": ["six==1.16.0"], "workdir": "/home/user/project",
                   "files": [{"path": "/home/user/greeting.txt", "content": "hello from the python sdk recipe\n"}],
                   "env": {"TEMPLATE_NONCE": nonce, "GREETING": "hi"}})
    env = dict(os.environ, LIZARD_API_URL=lizard_server.url, LIZARD_API_KEY=lizard_server.api_key)
    out = subprocess.run([str(BIN), "template", "build", "-f", str(recipe_dir / "recipe.yaml"), "--name", NAME],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, f"lizard template build failed ({out.returncode}):\n{out.stderr}\n{lizard_server.logs()}"
    assert f"template {NAME} ready" in out.stdout, out.stdout
    assert "[1/" in out.stderr and "Successfully installed six-1.16.0" in out.stderr, out.stderr
    yield NAME
    # The project's sandboxes of the template end first: a template in use cannot be deleted.
    for sb in CodeSandbox.list(state="running") + CodeSandbox.list(state="paused"):
        if sb.template == NAME:
            with CodeSandbox.connect(sb.sandbox_id) as left:
                left.kill()
    got = subprocess.run([str(BIN), "template", "get", NAME, "--json"], capture_output=True, text=True, timeout=60, env=env)
    key = json.loads(got.stdout)["key"]
    out = subprocess.run([str(BIN), "template", "delete", NAME], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    # Deleted and used by nothing: its build has left the shared template cache.
    cache = Path(os.environ.get("LIZARD_CACHE_DIR") or "/var/cache/lizard")
    assert not (cache / "templates" / f"custom-{key}").exists()


def test_create_from_custom_template(custom_template: str) -> None:
    with CodeSandbox.create(template=custom_template, timeout_ms=300_000) as sandbox:
        assert sandbox.get_info().template == custom_template
        run = sandbox.run_code('import os, six\nprint(six.__version__, os.getcwd(), os.environ["GREETING"])\n'
                               'open("/home/user/greeting.txt").read()')
        assert run.error is None, run.error
        assert run.stdout == "1.16.0 /home/user/project hi\n"
        assert run.results[0].data == repr("hello from the python sdk recipe\n")
        # The data stack of the base template is still there.
        assert sandbox.run_code("import pandas; 1").error is None


async def test_async_create_from_custom_template(custom_template: str) -> None:
    sandbox = await AsyncCodeSandbox.create(template=custom_template, timeout_ms=300_000)
    try:
        run = await sandbox.run_code("import six; six.__version__")
        assert run.results[0].data == "'1.16.0'"
    finally:
        await sandbox.kill()


def test_unknown_template_is_not_found(lizard_server: Any) -> None:
    with pytest.raises(lizard.NotFoundError) as exc:
        CodeSandbox.create(template="no-such-template")
    assert "build it first" in str(exc.value)


def test_sdk_build_is_cached(custom_template: str) -> None:
    """Template.build of the recipe the CLI built: found in the cache, at once, no step."""
    events: List[Dict[str, Any]] = []
    info = Template.build(custom_template, RECIPE, on_event=events.append)
    assert info.name == custom_template and info.build_ms > 0
    assert [e["type"] for e in events] == ["done"] and events[0]["cached"] is True, events
    assert info.key == Template.get(custom_template).key
    assert [t.name for t in Template.list()] == [custom_template]
    assert info.recipe["files"][0] == {"path": "/home/user/greeting.txt", "mode": 420, "owner": "user", "size": 33}


async def test_broken_recipe_raises_with_the_step(custom_template: str) -> None:
    """A pip requirement that does not exist fails the build at its fetch, before anything is copied."""
    steps: List[str] = []
    with pytest.raises(TemplateBuildError) as exc:
        await AsyncTemplate.build("sdk-py-broken", {"pip": ["six==0.0.0.1"]},
                                  on_event=lambda e: steps.append(e["name"]) if e["type"] == "step" else None)
    err = exc.value
    assert err.code == "invalid_argument" and err.step is not None and err.step.startswith("fetching packages")
    assert "six==0.0.0.1" in (err.log or ""), err.log
    assert len(steps) == 1, steps
    assert [t.name for t in await AsyncTemplate.list()] == [custom_template]
