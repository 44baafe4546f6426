// Injected faults (POST /__control/fault): status, malformed, stall, truncate.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, send, rawSign, listV2, parseListing, parseError, EMPTY_SHA256 } from './helpers.mjs';

let s3;
const BUCKET = 'fault-test';

before(async () => {
  s3 = await startServer();
  await s3.control('POST', `/__control/bucket?name=${BUCKET}`);
  await s3.control('POST', `/__control/objects?bucket=${BUCKET}`, {
    objects: Array.from({ length: 40 }, (_, i) => ({ key: `k/${String(i).padStart(3, '0')}`, data: `v${i}` })),
  });
});

after(async () => {
  assert.deepEqual(await s3.stop(), { code: 0, signal: null });
});

beforeEach(async () => {
  await s3.control('POST', '/__control/clear');
});

const list = (params, opts) => listV2(s3, BUCKET, params, opts);

test('status faults answer with S3\'s error document, count times, then the real answer', async () => {
  const f = await s3.control('POST', '/__control/fault', { kind: 'status', status: 503, count: 2 });
  assert.deepEqual([f.kind, f.status, f.code, f.count], ['status', 503, 'SlowDown', 2]);
  for (let i = 0; i < 2; i++) {
    const r = await list();
    assert.equal(r.status, 503);
    assert.equal(r.headers['content-type'], 'application/xml');
    assert.deepEqual([parseError(r.body).code, parseError(r.body).message], ['SlowDown', 'Please reduce your request rate.']);
  }
  const ok = await list();
  assert.equal(ok.status, 200);
  assert.equal(parseListing(ok.body).keys.length, 40);
  assert.deepEqual(await s3.control('GET', '/__control/faults'), []);
  const log = await s3.control('GET', '/__control/requests');
  assert.deepEqual(log.map((e) => [e.status, e.fault, e.signature_ok]), [[503, 'status', true], [503, 'status', true], [200, null, true]]);
});

test('status faults: defaults per status, custom code and message', async () => {
  const cases = [
    [{ status: 500 }, 500, 'InternalError', 'We encountered an internal error. Please try again.'],
    [{ status: 403 }, 403, 'AccessDenied', 'Access Denied'],
    [{ status: 404 }, 404, 'NoSuchBucket', 'The specified bucket does not exist'],
    [{ status: 500, code: 'InternalError', message: 'disk on fire' }, 500, 'InternalError', 'disk on fire'],
    [{ status: 403, code: 'AllAccessDisabled', message: 'All access to this object has been disabled' }, 403, 'AllAccessDisabled', 'All access to this object has been disabled'],
  ];
  for (const [spec, status, code, message] of cases) {
    await s3.control('POST', '/__control/fault', { kind: 'status', ...spec });
    const r = await list();
    assert.equal(r.status, status);
    const e = parseError(r.body);
    assert.deepEqual([e.code, e.message], [code, message]);
    assert.match(e.text, /<Resource>\/fault-test<\/Resource><RequestId>[0-9A-F]{16}<\/RequestId>/);
  }
});

test('match restricts a fault to requests whose path+query contains the string', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'status', status: 500, match: 'continuation-token=', count: 1 });
  // Page 1 is not hit, page 2 is, page 2 again succeeds.
  const p1 = await list([['max-keys', '10']]);
  assert.equal(p1.status, 200);
  const token = parseListing(p1.body).nextToken;
  assert.ok(token);
  const p2 = await list([['continuation-token', token], ['max-keys', '10']]);
  assert.equal(p2.status, 500);
  const p2b = await list([['continuation-token', token], ['max-keys', '10']]);
  assert.equal(p2b.status, 200);
  assert.equal(parseListing(p2b.body).keys[0], 'k/010');
});

test('count -1 lasts until /__control/clear', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'status', status: 503, count: -1 });
  for (let i = 0; i < 5; i++) assert.equal((await list()).status, 503);
  assert.equal((await s3.control('GET', '/__control/faults'))[0].applied, 5);
  await s3.control('POST', '/__control/clear?what=faults');
  assert.equal((await list()).status, 200);
});

test('faults spare badly signed requests and the control API', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'status', status: 500, count: 1 });
  const unsigned = await send({ port: s3.port, path: `/${BUCKET}?list-type=2`, headers: { 'x-amz-content-sha256': EMPTY_SHA256 } });
  assert.equal(parseError(unsigned.body).code, 'AccessDenied');
  await s3.control('PUT', `/__control/object?bucket=${BUCKET}&key=extra`, Buffer.from('e'));
  assert.equal((await list()).status, 500, 'the fault was still pending');
  await s3.control('DELETE', `/__control/object?bucket=${BUCKET}&key=extra`);
});

test('malformed: 200 with a body that is not well-formed XML', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'malformed' });
  const r = await list();
  assert.equal(r.status, 200);
  assert.equal(r.headers['content-type'], 'application/xml');
  assert.equal(Number(r.headers['content-length']), r.body.length, 'complete transfer, broken content');
  assert.match(r.body.toString(), /^<\?xml/);
  assert.doesNotMatch(r.body.toString(), /<\/ListBucketResult>/);
  assert.throws(() => parseListing(r.body), /not a ListBucketResult/);
  assert.equal((await list()).status, 200);
  // A caller-supplied body.
  await s3.control('POST', '/__control/fault', { kind: 'malformed', body: '<ListBucketResult><Contents><Key>a</Contents>' });
  assert.equal((await list()).body.toString(), '<ListBucketResult><Contents><Key>a</Contents>');
});

test('stall: the answer comes late but intact', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'stall', seconds: 1.2 });
  const t0 = Date.now();
  const r = await list();
  const took = Date.now() - t0;
  assert.equal(r.status, 200);
  assert.equal(parseListing(r.body).keys.length, 40);
  assert.ok(took >= 1150, `took ${took} ms`);
});

test('stall: a client that gives up is not kept waiting, and the server carries on', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'stall', seconds: 60, count: 2 });
  for (let i = 0; i < 2; i++) {
    const p = `/${BUCKET}?list-type=2`;
    const t0 = Date.now();
    await assert.rejects(
      send({ port: s3.port, path: p, headers: rawSign({ path: `/${BUCKET}`, query: 'list-type=2', headers: { host: `127.0.0.1:${s3.port}` } }), timeoutMs: 300 }),
      (e) => e.code === 'CLIENT_TIMEOUT',
    );
    assert.ok(Date.now() - t0 < 5000);
  }
  // The proxy is alive and answers normally.
  const r = await list();
  assert.equal(r.status, 200);
  await new Promise((res) => setTimeout(res, 100));
  const log = await s3.control('GET', '/__control/requests');
  const stalled = log.filter((e) => e.fault === 'stall');
  assert.equal(stalled.length, 2);
  for (const e of stalled) assert.deepEqual([e.client_closed, e.status, e.error], [true, 0, 'ClientClosed']);
  assert.equal(log[log.length - 1].status, 200);
});

test('truncate: headers promise the full length, the connection closes mid-body', async () => {
  await s3.control('POST', '/__control/fault', { kind: 'truncate' });
  const err = await list().then(() => null, (e) => e);
  assert.ok(err, 'the response must not complete');
  const e = (await s3.control('GET', '/__control/requests')).at(-1);
  assert.equal(e.fault, 'truncate');
  assert.ok(e.truncated_at > 0);
  const full = await list();
  assert.equal(full.status, 200);
  assert.ok(e.truncated_at < full.body.length);
  // With an explicit byte count, and seen from a raw socket.
  await s3.control('POST', '/__control/fault', { kind: 'truncate', bytes: 25 });
  const { default: net } = await import('node:net');
  const headers = rawSign({ path: `/${BUCKET}`, query: 'list-type=2', headers: { host: `127.0.0.1:${s3.port}` } });
  const raw = await new Promise((resolve, reject) => {
    const sock = net.connect(s3.port, '127.0.0.1', () => {
      sock.write(`GET /${BUCKET}?list-type=2 HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
    });
    const chunks = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    sock.on('error', reject);
  });
  const [head, bodyPart] = raw.split('\r\n\r\n');
  assert.match(head, /^HTTP\/1\.1 200 /);
  const declared = Number(/content-length: (\d+)/i.exec(head)[1]);
  assert.equal(declared, full.body.length);
  assert.equal(Buffer.byteLength(bodyPart, 'latin1'), 25);
});

test('fault specs are validated', async () => {
  for (const bad of [
    { kind: 'status', status: 200 },
    { kind: 'status', count: 0 },
    { kind: 'stall', seconds: -1 },
    { kind: 'truncate', bytes: -5 },
    { kind: 'status', match: 5 },
    {},
  ]) {
    await assert.rejects(s3.control('POST', '/__control/fault', bad), /400/, JSON.stringify(bad));
  }
  assert.deepEqual(await s3.control('GET', '/__control/faults'), []);
});
