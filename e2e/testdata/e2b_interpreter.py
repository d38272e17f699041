"""E2B's code interpreter SDK against a cluster (e2e/e2b_test.go): a sandbox created through one `lizard
api` with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, then connected to and run through the other
(OTHER_API, the test's own variable), then killed under a running cell. Prints the figures as one JSON
line, then "ok"."""

import json
import os
import threading
import time

from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

other = os.environ["OTHER_API"]

sb = Sandbox.create(metadata={"suite": "e2b-cluster"})
ex = sb.run_code("import matplotlib.pyplot as plt\nx = 20\nplt.plot([1, 2]); plt.show()\nx + 1")
assert ex.error is None, ex.error
assert ex.results[0].png and not ex.results[0].is_main_result, ex.results
assert ex.text == "21", ex.text

# The other API process: its envd tokens and routes are the first's.
there = Sandbox.connect(sb.sandbox_id, api_url=other + "/e2b", sandbox_url=other + "/e2b/sandbox")
assert there.run_code("x * 2").text == "40"
assert sb.sandbox_id in [s.sandbox_id for s in Sandbox.list(api_url=other + "/e2b").next_items()]

killed_at = []


def kill():
    time.sleep(2)
    killed_at.append(time.monotonic())
    Sandbox.kill(sb.sandbox_id, api_url=other + "/e2b")


threading.Thread(target=kill, daemon=True).start()
try:
    sb.run_code("import time\ntime.sleep(120)")
    raise SystemExit("the run outlived its sandbox")
except TimeoutException as e:
    assert "killed" in str(e), e
print(json.dumps({"killEndS": time.monotonic() - killed_at[0]}))
print("ok")
