// The seed's "Use it as an LLM tool" example, verbatim, plus three calls standing in for the
// model's tool calls. Needs a running `lizard serve` and LIZARD_API_URL / LIZARD_API_KEY of
// project proj_123 (see README.md beside this file).
import { CodeSandbox } from '@lizard-build/sdk';

const sandbox = await CodeSandbox.create({ projectId: 'proj_123', timeoutMs: 600_000 });

// Call this when the model asks to run Python. Return the text to send back to it.
async function runPython(code: string): Promise<string> {
  const run = await sandbox.runCode(code, { timeoutMs: 30_000 });
  if (run.error) return `${run.error.name}: ${run.error.message}\n${run.error.traceback}`;
  const values = run.results.flatMap((r) =>
    r.type === 'result' && r.mime.startsWith('text/') ? [r.data] : [],
  );
  return [run.stdout, ...values].filter(Boolean).join('\n');
}

// Added: what the model might ask for. Variables survive between calls.
console.log(await runPython('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})\nprint("rows:", len(df))\ndf'));
console.log(await runPython('df.x.sum()'));
console.log(await runPython('1/0'));

// When the conversation ends:
await sandbox.kill();
