// Code written for E2B's JavaScript SDK (`npm i @e2b/code-interpreter`),
// nothing of Lizard's in it. Run it against Lizard with the three variables
// of docs/e2b.md and nothing else:
//
//   npm ci
//   E2B_API_URL=http://HOST:PORT/e2b E2B_SANDBOX_URL=http://HOST:PORT/e2b/sandbox E2B_API_KEY=lz_... \
//     node example.mjs
//
// It uses the code interpreter (a result, an error, a chart, JavaScript that
// keeps its variables), commands (run, background + wait), a PTY (create,
// input, output, resize, kill), files (write, read, list, watch) and
// pause/resume, checks every answer, and exits non-zero at the first one
// that is not what E2B's SDK documents.

import { CommandExitError, Sandbox } from '@e2b/code-interpreter'

function check(what, ok, got) {
  if (!ok) throw new Error(`FAIL ${what}: got ${JSON.stringify(got)}`)
  console.log(`ok   ${what}`)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

let sbx = await Sandbox.create({ timeoutMs: 300_000 })
try {
  // Code interpreter: a result, state between calls, an error, a chart.
  let ex = await sbx.runCode('import math\nradius = 2\nround(math.pi * radius ** 2, 2)')
  check('runCode result', ex.text === '12.57' && ex.results[0].isMainResult, ex.text)
  check('runCode keeps variables', (await sbx.runCode('radius * 21')).text === '42')
  ex = await sbx.runCode("{}['missing']")
  check('runCode error', ex.error?.name === 'KeyError', ex.error)
  ex = await sbx.runCode(
    "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5], label='sold')\nplt.title('sales')\nplt.show()",
  )
  const chart = ex.results[0]?.chart
  check('runCode chart', chart?.type === 'bar' && chart.title === 'sales' && chart.elements.length === 2, chart)
  check('runCode chart png', Boolean(ex.results[0].png))
  const streamed = []
  await sbx.runCode("print('streamed')", { onStdout: (m) => streamed.push(m.line) })
  check('runCode onStdout', streamed.join('') === 'streamed\n', streamed)
  await sbx.runCode('const answer = 6 * 7', { language: 'javascript' })
  ex = await sbx.runCode('answer', { language: 'javascript' })
  check('runCode javascript keeps variables', ex.text === '42', ex.text)
  ex = await sbx.runCode('function half(n: number): number { return n / 2 }\nhalf(42)', { language: 'typescript' })
  check('runCode typescript', ex.text === '21', ex.error ?? ex.text)

  // Commands: run, a failing one, background + wait.
  const r = await sbx.commands.run('echo hello from $SHELL_NAME', { envs: { SHELL_NAME: 'bash' } })
  check('commands.run', r.stdout === 'hello from bash\n' && r.exitCode === 0, r)
  try {
    await sbx.commands.run('exit 7')
    check('commands.run exit code', false, 'no CommandExitError')
  } catch (e) {
    check('commands.run exit code', e instanceof CommandExitError && e.exitCode === 7, String(e))
  }
  const h = await sbx.commands.run('sleep 1; echo done in background', { background: true })
  check('commands.list', (await sbx.commands.list()).some((p) => p.pid === h.pid))
  check('background wait', (await h.wait()).stdout === 'done in background\n')

  // PTY: create, send input, read output, resize, kill.
  let term = ''
  const dec = new TextDecoder()
  const enc = new TextEncoder()
  let t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (term += dec.decode(d, { stream: true })) })
  await sbx.pty.sendInput(t.pid, enc.encode('echo $((6*7))\n'))
  await sbx.pty.resize(t.pid, { cols: 132, rows: 50 })
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\nexit\n'))
  await t.wait()
  check('pty output', term.includes('42'), term)
  check('pty resize', term.includes('50 132'), term)
  t = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  check('pty kill', (await sbx.pty.kill(t.pid)) === true)

  // Files: write, read, list, watch.
  await sbx.files.makeDir('/home/user/data')
  const events = []
  const w = await sbx.files.watchDir('/home/user/data', (e) => void events.push(e.name))
  await sbx.files.write('/home/user/data/notes.txt', 'first line\n')
  check('files.read', (await sbx.files.read('/home/user/data/notes.txt')) === 'first line\n')
  await sbx.files.write([{ path: '/home/user/data/b.bin', data: new Uint8Array([0, 1, 2]).buffer }])
  const bytes = await sbx.files.read('/home/user/data/b.bin', { format: 'bytes' })
  check('files.read bytes', bytes.join(',') === '0,1,2', Array.from(bytes))
  const names = (await sbx.files.list('/home/user/data')).map((e) => e.name).sort()
  check('files.list', names.join(',') === 'b.bin,notes.txt', names)
  for (let i = 0; i < 100 && !events.includes('notes.txt'); i++) await sleep(100)
  await w.stop()
  check('files.watchDir', events.includes('notes.txt'), events)

  // Pause and resume: variables survive.
  await sbx.runCode("survivor = 'still here'")
  check('pause', (await sbx.pause()) === true)
  check('paused state', (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused')
  sbx = await Sandbox.connect(sbx.sandboxId)
  check('resume keeps variables', (await sbx.runCode('survivor')).text === 'still here')
  check('resume keeps JavaScript variables', (await sbx.runCode('answer', { language: 'javascript' })).text === '42')
  check('resume keeps files', (await sbx.files.read('/home/user/data/notes.txt')) === 'first line\n')
} finally {
  await sbx.kill()
}
console.log('ok')
