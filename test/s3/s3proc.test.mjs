// test/lib/s3proc.py, the Python helper other suites use, checked through its
// self-test: start on a free port, buckets, odd keys, bulk puts, a signed
// paginated listing with Python's own SigV4, faults, the request log, stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import path from 'node:path';
import { HERE } from './helpers.mjs';

const PY = process.env.PY || '/usr/bin/python3';
let skip = false;
try {
  execFileSync(PY, ['--version']);
} catch {
  skip = `needs ${PY}`;
}

test('s3proc.py self-test passes', { skip, timeout: 120000 }, async () => {
  const script = path.join(HERE, '..', 'lib', 's3proc.py');
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(PY, [script, '--self-test'], { encoding: 'utf8' }, (err, out, errOut) => resolve({ code: err ? err.code : 0, stdout: out, stderr: errOut }));
  });
  assert.equal(code, 0, stderr);
  assert.match(stdout, /s3proc self-test ok/);
});
