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
const url = require('url');
const { createRequire, isBuiltin } = require('module');

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
// declarations at the start of a line (of the code's own indentation: E2B's
// suites send indented cells) become global properties (a function's locals
// would not outlive the call) and the last line, when it is an expression,
// is returned as the call's value.
function asAsync(code) {
  const indent = commonIndent(code);
  const decl = new RegExp(`^(${indent})(?:const|let|var)\\s+([A-Za-z_$][\\w$]*)\\s*=`);
  const source = code.split('\n');
  const lines = source.map((l) => l.replace(decl, '$1globalThis.$2 ='));
  let last = lines.length - 1;
  while (last > 0 && !lines[last].trim()) last--;
  if (decl.test(source[last])) {
    // A declaration has no value, as in Node's REPL, though its rewrite has.
    return `(async () => {\n${lines.join('\n')}\n})()`;
  }
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

// commonIndent is the blanks that begin every non-blank line of code.
function commonIndent(code) {
  const leads = code.split('\n').filter((l) => l.trim()).map((l) => /^[ \t]*/.exec(l)[0]);
  if (!leads.length) return '';
  let indent = leads[0];
  for (const lead of leads) {
    let n = 0;
    while (n < indent.length && indent[n] === lead[n]) n++;
    indent = indent.slice(0, n);
  }
  return indent;
}

// A static import statement at the start of a line: import x from 'm',
// import { a, b as c } from 'm', import * as ns from 'm', import x, { a }
// from 'm', import x, * as ns from 'm', import 'm' (with or without
// attributes and a semicolon). Groups: indent, default, named, namespace,
// from, quote, specifier.
const IMPORT = /^([ \t]*)import[ \t]*(?:([A-Za-z_$][\w$]*)\s*,?\s*)?(?:\{([^}]*)\}\s*|\*\s*as\s+([A-Za-z_$][\w$]*)\s*)?(from\s*)?(['"])([^'"\n]+)\6[ \t]*(?:(?:with|assert)\s*\{[^}\n]*\})?[ \t]*;?/gm;
const IMPORT_FN = "globalThis[Symbol.for('lizard.import')]";

// rewriteImports turns a call's static imports into dynamic ones whose
// bindings are global properties, as E2B's JavaScript kernel takes import
// statements: a script (what keeps a context's variables) cannot hold
// them, and a module's bindings would not outlive the call. It returns
// null when the code has none.
function rewriteImports(code) {
  let found = false;
  const out = code.replace(IMPORT, (all, lead, def, named, ns, from, _q, spec) => {
    if (!from !== !(def || named !== undefined || ns)) return all; // not an import statement
    found = true;
    const source = `(await ${IMPORT_FN}(${JSON.stringify(spec)}))`;
    const keep = all.replace(/[^\n]/g, ''); // the line numbers of what follows
    const parts = [];
    if (ns) parts.push(`void (globalThis.${ns} = ${source});`);
    const props = [];
    if (def) props.push(`default: globalThis.${def}`);
    for (const item of (named || '').split(',')) {
      const m = /^\s*([A-Za-z_$][\w$]*|'[^']*'|"[^"]*")(?:\s+as\s+([A-Za-z_$][\w$]*))?\s*$/.exec(item);
      if (!m) {
        if (item.trim()) throw new SyntaxError(`cannot read the import of ${JSON.stringify(item.trim())} from '${spec}'`);
        continue;
      }
      const name = /^['"]/.test(m[1]) ? JSON.stringify(m[1].slice(1, -1)) : m[1];
      props.push(`${name}: globalThis.${m[2] || m[1]}`);
    }
    if (props.length) parts.push(`void ({ ${props.join(', ')} } = ${ns ? `globalThis.${ns}` : source});`);
    if (!parts.length) parts.push(`void ${source};`);
    return lead + parts.join(' ') + keep;
  });
  return found ? out : null;
}

// importFrom is what a rewritten import calls: the module as import()
// would load it from the context's working directory (a relative path, or
// a package in its node_modules), rather than from this harness's.
globalThis[Symbol.for('lizard.import')] = async function importFrom(spec) {
  if (spec.startsWith('.') || spec.startsWith('/')) {
    return import(url.pathToFileURL(path.resolve(process.cwd(), spec)).href);
  }
  if (!isBuiltin(spec) && !/^[a-z]+:/.test(spec)) {
    let resolved = null;
    try {
      resolved = globalThis.require.resolve(spec);
    } catch {
      // an ES-only package (no "require" export) is left to import() itself
    }
    if (resolved) return import(url.pathToFileURL(resolved).href);
  }
  return import(spec);
};

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
    let code = req.typescript ? stripTypes(req.code) : req.code;
    const imported = rewriteImports(code);
    if (imported !== null) {
      code = imported;
    } else {
      try {
        script = new vm.Script(code, { filename: '<cell>' });
      } catch (e) {
        if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
      }
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
