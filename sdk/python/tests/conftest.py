import sys
from pathlib import Path

# fake.py sits beside the tests; make it importable whatever directory pytest starts in.
sys.path.insert(0, str(Path(__file__).parent))
# Test this checkout's SDK, not whichever copy the venv has installed (make testvenv installs the main
# checkout's in editable mode, so a worktree's tests would otherwise run against main's code).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
