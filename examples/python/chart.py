"""Charts: draw a matplotlib chart in a sandbox and save it as chart.png (the guide's example, verbatim).

Needs a running `lizard serve` and LIZARD_API_URL / LIZARD_API_KEY (a key of project proj_123).
"""

import atexit

from lizard import CodeSandbox

sandbox = CodeSandbox.create(project_id="proj_123", timeout_ms=300_000)
atexit.register(sandbox.kill)  # kill the sandbox however the lines below end

import base64
from pathlib import Path

run = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
png = next(r.data for r in run.results if r.mime == "image/png")
Path("chart.png").write_bytes(base64.b64decode(png))

print(f"wrote chart.png ({Path('chart.png').stat().st_size} bytes)")
