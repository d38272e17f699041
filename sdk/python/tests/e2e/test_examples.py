"""Runs the scripts in examples/python as a user would and checks what they print."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lizard import CodeSandbox

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "python"


def _running() -> set:  # type: ignore[type-arg]
    return {s.sandbox_id for s in CodeSandbox.list(state="running")}


def run_example(name: str, cwd: Path) -> str:
    """Run one example script in cwd; check it exits 0 and leaves no sandbox running."""
    before = _running()
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    leaked = _running() - before
    assert not leaked, f"{name} left sandboxes running: {leaked}"
    return proc.stdout


def test_run_with_state(tmp_path: Path) -> None:
    assert run_example("run_with_state.py", tmp_path) == "np.int64(6)\nZeroDivisionError\n"


def test_llm_tool(tmp_path: Path) -> None:
    out = run_example("llm_tool.py", tmp_path)
    assert out.startswith("x is set\n\n42\n"), out
    assert "<table" in out, "the DataFrame's HTML must reach the model"
    assert "ZeroDivisionError: division by zero\n" in out


def test_chart(tmp_path: Path) -> None:
    out = run_example("chart.py", tmp_path)
    png = (tmp_path / "chart.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert out == f"wrote chart.png ({len(png)} bytes)\n"
