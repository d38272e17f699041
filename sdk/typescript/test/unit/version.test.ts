// VERSION is Lizard's version (internal/version/VERSION) and package.json's.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { VERSION } from '../../src/index.js';

// build-test/test/unit -> sdk/typescript
const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const root = path.resolve(sdk, '../..');

test('VERSION is Lizard version and the package version', () => {
  assert.match(VERSION, /^\d+\.\d+\.\d+$/);
  assert.equal(VERSION, fs.readFileSync(path.join(root, 'internal/version/VERSION'), 'utf8').trim());
  assert.equal(VERSION, JSON.parse(fs.readFileSync(path.join(sdk, 'package.json'), 'utf8')).version);
});
