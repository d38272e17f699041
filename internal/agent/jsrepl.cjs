'use strict';
// The harness of a stateful JavaScript context (jsrepl.go): one Node process
// per context runs each call's code in its one global scope, so variables
// persist between calls as in Node's REPL and E2B's JavaScript kernel. Calls
// come as JSON lines on fd 3; events go as JSON lines on fd 4: stdout,
// stderr, result (the last expression's value), error, done. Output goes on
// fd 4 too, so it is ordered with the call's end.
const fs = require('fs');
const net = require('net');
const path = require('path');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { createRequire } = require('module');

const REQ = 3;
const EV = 4;

function send(msg) {
  const b = Buffer.from(JSON.stringify(msg) + '\n');
  let off = 0;
  while (off < b.length) {
    try {
      off += fs.writeSync(EV, b, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

for (const [kind, stream] of [['stdout', process.stdout], ['stderr', process.stderr]]) {
  stream.write = function write(chunk, encoding, cb) {
    if (typeof encoding === 'function') cb = encoding;
    send({ t: kind, text: typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8') });
    if (typeof cb === 'function') process.nextTick(cb);
    return true;
  };
}

// An error thrown after its call ended (a timer, a promise nobody awaited)
// is printed, as Node's REPL does, rather than ending the context.
process.on('uncaughtException', (e) => process.stderr.write(`Uncaught ${describe(e).traceback}\n`));
process.on('unhandledRejection', (e) => process.stderr.write(`Uncaught (in promise) ${describe(e).traceback}\n`));

globalThis.require = createRequire(path.join(process.cwd(), '<context>'));

function describe(e) {
  if (e === null || typeof e !== 'object') {
    return { name: 'Error', value: String(e), traceback: `Uncaught ${util.inspect(e)}` };
  }
  let name = String(e.name || 'Error');
  const ctor = e.constructor && e.constructor.name;
  // class MyError extends Error {} keeps name "Error"; its class says more.
  if (name === 'Error' && ctor && ctor !== 'Object') name = ctor;
  return { name, value: String(e.message ?? ''), traceback: ownFrames(String(e.stack || `${name}: ${e.message}`)) };
}

// ownFrames drops the stack frames of this harness and of Node's vm.
function ownFrames(stack) {
  return stack.split('\n').filter((l) => !/^\s+at .*(node:vm|node:internal|jsrepl\.cjs)/.test(l)).join('\n');
}

// asAsync turns code with top-level await into an async function's body:
// declarations at the start of a line become global properties (a function's
// locals would not outlive the call) and the last line, when it is an
// expression, is returned as the call's value.
function asAsync(code) {
  const lines = code.split('\n').map((l) => l.replace(/^(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=/, 'globalThis.$1 ='));
  let last = lines.length - 1;
  while (last > 0 && !lines[last].trim()) last--;
  const body = lines.slice(0, last).join('\n');
  const tail = lines[last].replace(/;\s*$/, '');
  const returning = `(async () => {\n${body}\nreturn (\n${tail}\n);\n})()`;
  try {
    new vm.Script(returning);
    return returning;
  } catch {
    return `(async () => {\n${lines.join('\n')}\n})()`;
  }
}

// stripTypes turns a TypeScript context's code into JavaScript with Node's
// own type stripper (Node 22.13 and later; the interpreter template's is 22),
// enums and namespaces included, without its once-per-process
// ExperimentalWarning on the call's stderr.
function stripTypes(code) {
  const { stripTypeScriptTypes } = require('module');
  if (typeof stripTypeScriptTypes !== 'function') {
    const e = new Error(`TypeScript needs Node 22.13 or later (module.stripTypeScriptTypes); this sandbox's node is ${process.version}`);
    e.name = 'StartError';
    throw e;
  }
  const emit = process.emitWarning;
  process.emitWarning = () => {};
  try {
    return stripTypeScriptTypes(code, { mode: 'transform' });
  } finally {
    process.emitWarning = emit;
  }
}

async function run(req) {
  const envs = req.envs || {};
  const saved = Object.fromEntries(Object.keys(envs).map((k) => [k, process.env[k]]));
  Object.assign(process.env, envs);
  try {
    let value;
    let script = null;
    const code = req.typescript ? stripTypes(req.code) : req.code;
    try {
      script = new vm.Script(code, { filename: '<cell>' });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
    }
    if (script) {
      value = script.runInThisContext({ displayErrors: false });
    } else {
      value = await vm.runInThisContext(asAsync(code), { filename: '<cell>', displayErrors: false });
    }
    if (value !== undefined) send({ t: 'result', text: util.inspect(value) });
  } catch (e) {
    send({ t: 'error', ...describe(e) });
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  send({ t: 'done' });
}

let queue = Promise.resolve();
// A socket, not fs.createReadStream: that reads in libuv's thread pool, whose
// blocked read() would keep process.exit() waiting for the thread.
const calls = readline.createInterface({ input: new net.Socket({ fd: REQ, readable: true, writable: false }) });
calls.on('line', (line) => {
  const req = JSON.parse(line);
  queue = queue.then(() => run(req));
});
calls.on('close', () => process.exit(0));
send({ t: 'ready' });
