"""E2B's Template SDK (PyPI e2b 2.63.0) against a real `lizard serve`, with nothing set but E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md): a template built from E2B's base template (Lizard's interpreter)
with copy (its files uploaded to the server), run_cmd, set_envs, set_workdir and a start command with a ready
check, then a sandbox made from it by name:tag; Template.exists, tags, a failing step, and what is refused."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List

import httpx
import pytest
from e2b import BuildException, Sandbox, Template, wait_for_url
from e2b.template.logger import LogEntry


@pytest.fixture(autouse=True)
def _e2b_env(lizard_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three variables of docs/e2b.md, and nothing else of E2B's."""
    for var in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("E2B_API_URL", f"{lizard_server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{lizard_server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", lizard_server.api_key)


def _delete(lizard_server: Any, name: str) -> None:
    """E2B's DELETE /templates/{id}, as its CLI's `template delete` sends it."""
    r = httpx.delete(f"{lizard_server.url}/e2b/templates/{name}", headers={"X-API-Key": lizard_server.api_key}, timeout=60)
    assert r.status_code in (204, 404), r.text


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "hello.txt").write_text("hello from a copy\n")
    (folder / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (folder / "run.sh").chmod(0o755)
    os.symlink("hello.txt", folder / "link.txt")
    return tmp_path


def test_build_copy_run_envs_workdir_start_then_create(lizard_server: Any, context_dir: Path) -> None:
    nonce = uuid.uuid4().hex[:10]
    name = f"e2b-tpl-{nonce}"
    template = (
        Template(file_context_path=str(context_dir))
        .from_template("base")
        .copy("folder/*", "data/")
        .run_cmd("cat data/hello.txt > data/by-run.txt && data/run.sh > data/ran.txt")
        .set_envs({"GREETING": "hi", "NONCE": nonce})
        .set_workdir("/home/user/app")
        .run_cmd("pwd > where.txt && echo $GREETING > greeting.txt")
        .set_start_cmd("python3 -m http.server 8000 --directory /home/user/data", wait_for_url("http://localhost:8000/hello.txt"))
    )
    logs: List[LogEntry] = []
    try:
        info = Template.build(template, f"{name}:v1", on_build_logs=logs.append)
        assert info.name == f"{name}:v1" and info.template_id == name and "v1" in info.tags
        text = "\n".join(str(l.message) for l in logs)
        assert f"Uploaded 'folder/*'" in text and "copying" in text, text  # the upload, then Lizard's build steps
        assert Template.exists(name) and Template.exists(f"{name}:v1")
        assert not Template.exists(f"{name}:v2") and not Template.exists(f"nope-{nonce}")
        assert Template.exists("base") and Template.exists("code-interpreter-v1")
        assert "v1" in [t.tag for t in Template.get_tags(name)]

        # The same steps and files again: uploads skipped, the build found in Lizard's cache.
        logs.clear()
        Template.build(template, name, on_build_logs=logs.append)
        assert "Skipping upload of 'folder/*', already cached" in "\n".join(str(l.message) for l in logs)

        sb = Sandbox.create(f"{name}:v1", timeout=120)
        try:
            assert sb.files.read("/home/user/data/hello.txt") == "hello from a copy\n"
            assert sb.files.read("/home/user/data/by-run.txt") == "hello from a copy\n"
            assert sb.files.read("/home/user/data/ran.txt") == "ran\n"
            assert sb.commands.run("readlink /home/user/data/link.txt").stdout.strip() == "hello.txt"
            assert sb.commands.run("stat -c %U:%a /home/user/data/hello.txt /home/user/data/run.sh").stdout.split() == ["user:644", "user:755"]
            assert sb.files.read("/home/user/app/where.txt") == "/home/user/app\n"
            assert sb.files.read("/home/user/app/greeting.txt") == "hi\n"
            run = sb.commands.run('echo "$GREETING $NONCE $(pwd)"')
            assert run.stdout.strip() == f"hi {nonce} /home/user/app"
            # The start command was ready before the template's snapshot: it answers at once.
            assert sb.commands.run("curl -s http://localhost:8000/hello.txt").stdout == "hello from a copy\n"
        finally:
            sb.kill()
    finally:
        _delete(lizard_server, name)
    assert not Template.exists(name)


def test_build_in_background_status_and_a_failing_step(lizard_server: Any) -> None:
    name = f"e2b-bad-{uuid.uuid4().hex[:10]}"
    template = Template().from_base_image().run_cmd("echo before-the-failure && exit 3")
    info = Template.build_in_background(template, name)
    status = Template.get_build_status(info)
    assert status.status.value in ("building", "error")
    deadline = time.monotonic() + 300
    while status.status.value == "building" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = Template.get_build_status(info)
    assert status.status.value == "error" and status.reason is not None
    assert "the build failed at step" in status.reason.message and "exit status 3" in status.reason.message
    assert any("before-the-failure" in e.message for e in status.reason.log_entries), status.reason
    with pytest.raises(BuildException, match="the build failed at step"):
        Template.build(template, name + "-2")
    assert not Template.exists(name) and not Template.exists(name + "-2")


def test_refused_before_a_build(lizard_server: Any, context_dir: Path) -> None:
    name = f"e2b-no-{uuid.uuid4().hex[:10]}"
    with pytest.raises(BuildException, match=r"npm.packages \"https://evil.test/x.tgz\": want a registry package"):
        Template.build(Template().from_base_image().npm_install("https://evil.test/x.tgz", g=True), name)
    # envd's words for a RUN as a user the image lacks (E2B's own tests match them), then Lizard's.
    with pytest.raises(BuildException, match="failed to run command 'whoami': command failed: unauthenticated: invalid username: 'mish': a Lizard sandbox has two users"):
        Template.build(Template().from_base_image().run_cmd("whoami", user="mish"), name)
    assert not Template.exists(name)


def test_from_template_of_a_custom_template_and_skip_cache(lizard_server: Any) -> None:
    """from_template of the project's own template builds on it: its steps are not run again (the
    build resumes from its build: the file its slow step stamped is the same), its env holds; skip_cache
    runs every step again (a new stamp)."""
    nonce = uuid.uuid4().hex[:10]
    parent, child = f"e2b-parent-{nonce}", f"e2b-child-{nonce}"

    def messages(logs: List[LogEntry]) -> str:
        return "\n".join(str(l.message) for l in logs)

    def stamp_of(name: str) -> tuple[str, str]:
        sb = Sandbox.create(name, timeout=120)
        try:
            out = sb.commands.run('cat /home/user/stamp /home/user/child; echo "$PARENT"').stdout.split()
            return out[0], " ".join(out[1:])
        finally:
            sb.kill()

    try:
        logs: List[LogEntry] = []
        Template.build(Template().from_template("base").run_cmd("sleep 5; date +%s%N > /home/user/stamp").set_envs({"PARENT": nonce}),
                       parent, on_build_logs=logs.append)
        assert "run: sleep 5" in messages(logs)
        on_parent = Template().from_template(parent).run_cmd("echo child > /home/user/child")
        logs.clear()
        Template.build(on_parent, child, on_build_logs=logs.append)
        text = messages(logs)
        assert "copying the cached build" in text and "run: sleep 5" not in text and "run: echo child" in text, text
        stamp, rest = stamp_of(child)
        assert rest == f"child {nonce}"

        logs.clear()
        Template.build(on_parent, child, on_build_logs=logs.append, skip_cache=True)
        assert "run: sleep 5" in messages(logs), messages(logs)
        again, rest = stamp_of(child)
        assert again != stamp and rest == f"child {nonce}"
    finally:
        _delete(lizard_server, child)
        _delete(lizard_server, parent)
    assert not Template.exists(child) and not Template.exists(parent)
