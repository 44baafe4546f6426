// server.mjs end to end: s3rver behind the SigV4-checking proxy on loopback.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import {
  startServer, send, rawSign, sdkSign, listV2, parseListing, parseError, uriEncode,
  canonicalQuery, serializeQuery, EMPTY_SHA256,
} from './helpers.mjs';

let s3;
const BUCKET = 'proxy-test';
const ODD_KEYS = [
  'plain.txt',
  'with space/a b.parquet',
  'day=27/hour=08/part-0.csv',
  'plus+sign&amp=1.bin',
  'percent%20literal%.txt',
  'ünïcödé/日本語 ファイル.json',
  'tilde~and(parens)!*\'.txt',
];

before(async () => {
  s3 = await startServer();
  await s3.control('POST', `/__control/bucket?name=${BUCKET}`);
  for (const [i, key] of ODD_KEYS.entries()) {
    await s3.control('PUT', `/__control/object?bucket=${BUCKET}&key=${encodeURIComponent(key)}`, Buffer.from(`body ${i}`));
  }
});

after(async () => {
  const exit = await s3.stop();
  assert.deepEqual(exit, { code: 0, signal: null }, 'server exits cleanly on SIGTERM');
});

async function lastLog() {
  const log = await s3.control('GET', '/__control/requests');
  return log[log.length - 1];
}

test('a ListObjectsV2 request signed by the AWS SDK passes, path style', async () => {
  const r = await listV2(s3, BUCKET, [], { sign: 'sdk' });
  assert.equal(r.status, 200, r.body.toString());
  const l = parseListing(r.body);
  assert.deepEqual([...l.keys].sort(), [...ODD_KEYS].sort());
  const entry = await lastLog();
  assert.equal(entry.signature_ok, true);
  assert.equal(entry.status, 200);
  assert.equal(entry.style, 'path');
  assert.equal(entry.path, `/${BUCKET}`);
});

test('the SDK signer with the query sent unsorted and a prefix with spaces and non-ASCII passes', async () => {
  const query = { prefix: 'ünïcödé/日本語 ', 'list-type': '2' };
  const host = `127.0.0.1:${s3.port}`;
  const headers = await sdkSign({ path: `/${BUCKET}`, query, headers: { host, 'x-amz-content-sha256': EMPTY_SHA256 } });
  const r = await send({ port: s3.port, path: `/${BUCKET}?${serializeQuery(query)}`, headers });
  assert.equal(r.status, 200, r.body.toString());
  assert.deepEqual(parseListing(r.body).keys, ['ünïcödé/日本語 ファイル.json']);
});

test('virtual-hosted style: <bucket>.localhost and <bucket>.s3.localhost', async () => {
  for (const style of ['vhost', 's3']) {
    for (const sign of ['sdk', 'raw']) {
      const r = await listV2(s3, BUCKET, [['prefix', 'day=27/']], { style, sign });
      assert.equal(r.status, 200, `${style}/${sign}: ${r.body}`);
      assert.deepEqual(parseListing(r.body).keys, ['day=27/hour=08/part-0.csv']);
      const e = await lastLog();
      assert.equal(e.style, 'virtual');
      assert.equal(e.bucket, BUCKET);
      assert.equal(e.host, style === 's3' ? `${BUCKET}.s3.localhost:${s3.port}` : `${BUCKET}.localhost:${s3.port}`);
    }
  }
});

test('keys with spaces, "+", "=", "%", "&" and non-ASCII round-trip through list and GET', async () => {
  const l = parseListing((await listV2(s3, BUCKET)).body);
  for (const [i, key] of ODD_KEYS.entries()) {
    assert.ok(l.keys.includes(key), key);
    const p = `/${BUCKET}/${uriEncode(key, true)}`;
    const headers = rawSign({ path: p, headers: { host: `127.0.0.1:${s3.port}` } });
    const r = await send({ port: s3.port, path: p, headers });
    assert.equal(r.status, 200, `${key}: ${r.body}`);
    assert.equal(r.body.toString(), `body ${i}`);
    assert.equal(l.contents.find((c) => c.key === key).size, `body ${i}`.length);
  }
});

test('pagination across 2,500 keys with continuation tokens', async () => {
  const bucket = 'many-keys';
  await s3.control('POST', `/__control/bucket?name=${bucket}`);
  const want = [];
  for (let i = 0; i < 2500; i++) want.push(`p/${String(i).padStart(5, '0')} é.dat`);
  await s3.control('POST', `/__control/objects?bucket=${bucket}`, { objects: want.map((key, i) => ({ key, size: i % 7 })) });
  for (const sign of ['raw', 'sdk']) {
    const got = [];
    let token = null;
    let pages = 0;
    do {
      const params = [['prefix', 'p/']];
      if (token) params.push(['continuation-token', token]);
      const r = await listV2(s3, bucket, params, { sign });
      assert.equal(r.status, 200, r.body.toString());
      const l = parseListing(r.body);
      got.push(...l.keys);
      pages += 1;
      token = l.isTruncated ? l.nextToken : null;
      if (l.isTruncated) assert.ok(token, 'a truncated page carries a token');
      // s3rver's tokens are base64: '+', '/' and '=' must be percent-encoded in the query.
    } while (token);
    assert.equal(pages, 3, sign);
    assert.deepEqual(got, want, sign);
  }
  const log = await s3.control('GET', '/__control/requests');
  const tokens = log.filter((e) => e.query.includes('continuation-token=')).map((e) => e.query);
  assert.ok(tokens.length >= 4);
  for (const q of tokens) assert.doesNotMatch(q.split('continuation-token=')[1].split('&')[0], /[+/=]/);
});

test('a query signed in another order than sent is rejected with SignatureDoesNotMatch', async () => {
  const host = `127.0.0.1:${s3.port}`;
  const p = `/${BUCKET}`;
  // Sent unsorted and signed verbatim (what libcurl 7.88 does with an unsorted URL).
  let headers = rawSign({ path: p, query: 'prefix=day&list-type=2', headers: { host } });
  let r = await send({ port: s3.port, path: `${p}?prefix=day&list-type=2`, headers });
  assert.equal(r.status, 403);
  assert.equal(parseError(r.body).code, 'SignatureDoesNotMatch');
  assert.match(parseError(r.body).canonicalRequest, /\nlist-type=2&prefix=day\n/);
  // Signed sorted but sent in another order: still fine for S3 (it sorts), so it passes.
  headers = rawSign({ path: p, query: 'list-type=2&prefix=day', headers: { host } });
  r = await send({ port: s3.port, path: `${p}?prefix=day&list-type=2`, headers });
  assert.equal(r.status, 200);
  // Signed sorted, but the server receives other parameters than were signed.
  headers = rawSign({ path: p, query: 'list-type=2&prefix=day', headers: { host } });
  r = await send({ port: s3.port, path: `${p}?list-type=2&prefix=dax`, headers });
  assert.equal(r.status, 403);
  assert.equal(parseError(r.body).code, 'SignatureDoesNotMatch');
  const e = await lastLog();
  assert.equal(e.signature_ok, false);
  assert.equal(e.error, 'SignatureDoesNotMatch');
  assert.match(e.canonical_request, /\nlist-type=2&prefix=dax\n/);
});

test('a query signed in another encoding than S3\'s canonical one is rejected', async () => {
  const host = `127.0.0.1:${s3.port}`;
  const p = `/${BUCKET}`;
  for (const q of [
    'list-type=2&prefix=with+space', // '+' for a space
    'list-type=2&prefix=%c3%bcn', // lower-case hex
    'list-type=2&prefix=day=27/', // '=' and '/' not encoded
  ]) {
    const headers = rawSign({ path: p, query: q, headers: { host } });
    const r = await send({ port: s3.port, path: `${p}?${q}`, headers });
    assert.equal(r.status, 403, q);
    assert.equal(parseError(r.body).code, 'SignatureDoesNotMatch', q);
  }
  // The same values canonically encoded pass.
  for (const [prefix, key] of [['with space/', 'with space/a b.parquet'], ['ün', 'ünïcödé/日本語 ファイル.json'], ['day=27/', 'day=27/hour=08/part-0.csv']]) {
    const q = canonicalQuery([['list-type', '2'], ['prefix', prefix]]);
    const headers = rawSign({ path: p, query: q, headers: { host } });
    const r = await send({ port: s3.port, path: `${p}?${q}`, headers });
    assert.equal(r.status, 200, q);
    assert.deepEqual(parseListing(r.body).keys, [key]);
  }
});

test('a path signed un-encoded is rejected: "+" and "=" in keys must be %2B and %3D', async () => {
  const host = `127.0.0.1:${s3.port}`;
  const p = `/${BUCKET}/day=27/hour=08/part-0.csv`;
  let headers = rawSign({ path: p, headers: { host } });
  let r = await send({ port: s3.port, path: p, headers });
  assert.equal(r.status, 403);
  assert.equal(parseError(r.body).code, 'SignatureDoesNotMatch');
  const enc = `/${BUCKET}/${uriEncode('day=27/hour=08/part-0.csv', true)}`;
  headers = rawSign({ path: enc, headers: { host } });
  r = await send({ port: s3.port, path: enc, headers });
  assert.equal(r.status, 200);
});

test('wrong secret, unknown key, missing Authorization, tampered header, missing x-amz-content-sha256', async () => {
  const host = `127.0.0.1:${s3.port}`;
  const p = `/${BUCKET}`;
  const q = 'list-type=2';
  const cases = [
    ['wrong secret', rawSign({ path: p, query: q, headers: { host }, secretKey: 'not-the-secret' }), 403, 'SignatureDoesNotMatch'],
    ['unknown key', rawSign({ path: p, query: q, headers: { host }, accessKey: 'AKIDUNKNOWN' }), 403, 'InvalidAccessKeyId'],
    ['no Authorization', { host, 'x-amz-content-sha256': EMPTY_SHA256 }, 403, 'AccessDenied'],
    ['tampered header', (() => {
      const h = rawSign({ path: p, query: q, headers: { host, 'x-amz-meta-who': 'alice' } });
      return { ...h, 'x-amz-meta-who': 'mallory' };
    })(), 403, 'SignatureDoesNotMatch'],
    ['tampered date', (() => {
      const h = rawSign({ path: p, query: q, headers: { host } });
      return { ...h, 'x-amz-date': h['x-amz-date'].replace(/\d(?=Z$)/, (d) => String((Number(d) + 1) % 10)) };
    })(), 403, 'SignatureDoesNotMatch'],
    ['no x-amz-content-sha256', rawSign({ path: p, query: q, headers: { host }, includeContentSha: false }), 400, 'InvalidRequest'],
    ['wrong region', rawSign({ path: p, query: q, headers: { host }, region: 'eu-central-1' }), 400, 'AuthorizationHeaderMalformed'],
    ['unsigned x-amz header', { ...rawSign({ path: p, query: q, headers: { host } }), 'x-amz-meta-extra': '1' }, 403, 'AccessDenied'],
  ];
  for (const [name, headers, status, code] of cases) {
    const r = await send({ port: s3.port, path: `${p}?${q}`, headers });
    assert.equal(r.status, status, name);
    assert.equal(r.headers['content-type'], 'application/xml', name);
    const err = parseError(r.body);
    assert.equal(err.code, code, name);
    assert.ok(err.message, name);
    assert.match(err.text, /^<\?xml version="1.0" encoding="UTF-8"\?>\n<Error><Code>/, name);
    const e = await lastLog();
    assert.deepEqual([e.signature_ok, e.status, e.error], [false, status, code], name);
  }
});

test('a PUT whose body does not match x-amz-content-sha256 is rejected; a matching one is stored', async () => {
  const host = `127.0.0.1:${s3.port}`;
  const p = `/${BUCKET}/put/one.txt`;
  const body = Buffer.from('payload');
  const hash = (await import('node:crypto')).createHash('sha256').update(body).digest('hex');
  let headers = rawSign({ method: 'PUT', path: p, headers: { host }, payloadHash: hash });
  let r = await send({ port: s3.port, method: 'PUT', path: p, headers, body: Buffer.from('other!!') });
  assert.equal(r.status, 400);
  assert.equal(parseError(r.body).code, 'XAmzContentSHA256Mismatch');
  headers = rawSign({ method: 'PUT', path: p, headers: { host }, payloadHash: hash });
  r = await send({ port: s3.port, method: 'PUT', path: p, headers, body });
  assert.equal(r.status, 200, r.body.toString());
  headers = rawSign({ path: p, headers: { host } });
  r = await send({ port: s3.port, path: p, headers });
  assert.equal(r.body.toString(), 'payload');
  await s3.control('DELETE', `/__control/object?bucket=${BUCKET}&key=${encodeURIComponent('put/one.txt')}`);
});

test('s3rver\'s own errors come through: NoSuchBucket, NoSuchKey', async () => {
  let r = await listV2(s3, 'no-such-bucket');
  assert.equal(r.status, 404);
  assert.equal(parseError(r.body).code, 'NoSuchBucket');
  assert.equal((await lastLog()).error, 'NoSuchBucket');
  const p = `/${BUCKET}/nothing-here`;
  r = await send({ port: s3.port, path: p, headers: rawSign({ path: p, headers: { host: `127.0.0.1:${s3.port}` } }) });
  assert.equal(r.status, 404);
  assert.equal(parseError(r.body).code, 'NoSuchKey');
});

test('every S3 request is one JSON line in D/requests.log', async () => {
  await s3.control('POST', '/__control/clear?what=requests');
  await listV2(s3, BUCKET, [['prefix', 'a b']]);
  await send({ port: s3.port, path: `/${BUCKET}?list-type=2`, headers: { 'x-amz-content-sha256': EMPTY_SHA256 } });
  const mem = await s3.control('GET', '/__control/requests');
  assert.equal(mem.length, 2);
  assert.deepEqual(mem.map((e) => [e.method, e.path, e.query, e.signature_ok, e.status]), [
    ['GET', `/${BUCKET}`, 'list-type=2&prefix=a%20b', true, 200],
    ['GET', `/${BUCKET}`, 'list-type=2', false, 403],
  ]);
  assert.equal(mem[0].host, `127.0.0.1:${s3.port}`);
  const file = readFileSync(path.join(s3.dir, 'requests.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(file.length > mem.length, 'the file keeps what /__control/clear dropped');
  assert.deepEqual(file.slice(-2).map((e) => e.seq), mem.map((e) => e.seq));
});

test('control API: object delete, bucket reset, and clear errors for bad input', async () => {
  await s3.control('PUT', `/__control/object?bucket=${BUCKET}&key=${encodeURIComponent('tmp/x y')}`, Buffer.from('x'));
  let keys = parseListing((await listV2(s3, BUCKET, [['prefix', 'tmp/']])).body).keys;
  assert.deepEqual(keys, ['tmp/x y']);
  await s3.control('DELETE', `/__control/object?bucket=${BUCKET}&key=${encodeURIComponent('tmp/x y')}`);
  keys = parseListing((await listV2(s3, BUCKET, [['prefix', 'tmp/']])).body).keys;
  assert.deepEqual(keys, []);
  await s3.control('POST', '/__control/bucket?name=scratch-bucket');
  await s3.control('PUT', '/__control/object?bucket=scratch-bucket&key=a', Buffer.from('a'));
  await s3.control('DELETE', '/__control/bucket?name=scratch-bucket');
  assert.equal((await listV2(s3, 'scratch-bucket')).status, 404);
  await assert.rejects(s3.control('PUT', '/__control/object?bucket=nope-bucket&key=a', Buffer.from('a')), /404 .*NoSuchBucket/);
  await assert.rejects(s3.control('PUT', '/__control/object?bucket=proxy-test', Buffer.from('a')), /400 .*key.* is required/);
  await assert.rejects(s3.control('POST', '/__control/fault', { kind: 'explode' }), /400 .*fault.kind/);
  await assert.rejects(s3.control('GET', '/__control/nothing'), /404/);
  const health = await s3.control('GET', '/__control/health');
  assert.deepEqual([health.port, health.region, health.access_key], [s3.port, 'us-east-1', 'finalizetest']);
});

test('--access-key, --secret-key, --region and --session-token configure what is accepted', async () => {
  const other = await startServer(['--access-key', 'AKOTHER', '--secret-key', 's3cr3t', '--region', 'eu-central-1', '--session-token', 'tok']);
  try {
    await other.control('POST', '/__control/bucket?name=eu-bucket');
    const base = { accessKey: 'AKOTHER', secretKey: 's3cr3t', region: 'eu-central-1' };
    let r = await listV2(other, 'eu-bucket', [], { ...base, headers: { host: `127.0.0.1:${other.port}`, 'x-amz-security-token': 'tok' } });
    assert.equal(r.status, 200, r.body.toString());
    r = await listV2(other, 'eu-bucket', [], { ...base, headers: { host: `127.0.0.1:${other.port}`, 'x-amz-security-token': 'bad' } });
    assert.equal(parseError(r.body).code, 'InvalidToken');
    r = await listV2(other, 'eu-bucket', [], { ...base, region: 'us-east-1', headers: { host: `127.0.0.1:${other.port}`, 'x-amz-security-token': 'tok' } });
    assert.equal(parseError(r.body).code, 'AuthorizationHeaderMalformed');
    r = await listV2(other, 'eu-bucket');
    assert.equal(parseError(r.body).code, 'InvalidAccessKeyId');
  } finally {
    await other.stop();
  }
});
