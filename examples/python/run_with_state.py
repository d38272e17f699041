"""Run code with state: the first example of the Lizard code interpreter guide, verbatim.

Needs a running `lizard serve` and LIZARD_API_URL / LIZARD_API_KEY (a key of project proj_123).
Prints:
    np.int64(6)
    ZeroDivisionError
"""

from lizard import CodeSandbox

with CodeSandbox.create(project_id="proj_123", timeout_ms=300_000) as sandbox:
    sandbox.run_code('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})')
    run = sandbox.run_code("df.x.sum()")
    print(run.results[0].data)  # "np.int64(6)"
    print(sandbox.run_code("1/0").error.name)  # "ZeroDivisionError"
