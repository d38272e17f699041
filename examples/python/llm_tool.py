"""Use a sandbox as an LLM tool: the guide's `run_python` example, verbatim, plus a short demo.

Give the model one tool, `run_python(code: str)`, and send back what this function returns. One sandbox
serves the whole conversation, so the model's variables survive between calls.
Needs a running `lizard serve` and LIZARD_API_URL / LIZARD_API_KEY (a key of project proj_123).
"""

from lizard import CodeSandbox

sandbox = CodeSandbox.create(project_id="proj_123", timeout_ms=600_000)

def run_python(code: str) -> str:
    """Call this when the model asks to run Python. Return the text to send back to it."""
    run = sandbox.run_code(code, timeout_ms=30_000)
    if run.error:
        return f"{run.error.name}: {run.error.message}\n{run.error.traceback}"
    values = [r.data for r in run.results if r.mime.startswith("text/")]
    return "\n".join(filter(None, [run.stdout, *values]))

if __name__ == "__main__":
    # What a model might send, one tool call at a time.
    try:
        print(run_python("x = 21\nprint('x is set')\nx * 2"))
        print(run_python('import pandas as pd\npd.DataFrame({"x": [1, 2, 3]})'))
        print(run_python("x / 0"))
    finally:
        # When the conversation ends:
        sandbox.kill()
