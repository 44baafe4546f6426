// The proxy's SigV4 verifier (sigv4.mjs) on its own: AWS's documented
// examples, the hand-written test signer, and each rejection rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { verifyRequest, canonicalPath, parseQuery, computeSignature, headerMap } from './sigv4.mjs';
import { rawSign, sdkSign, serializeQuery, EMPTY_SHA256, ACCESS_KEY, SECRET_KEY } from './helpers.mjs';

// The examples of "Signature Calculations for the Authorization Header:
// Transferring Payload in a Single Chunk" in the Amazon S3 API reference.
const AWS_KEY = 'AKIAIOSFODNN7EXAMPLE';
const AWS_SECRET = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
const AWS_DATE = new Date(Date.UTC(2013, 4, 24, 0, 0, 0));
const HOST = 'examplebucket.s3.amazonaws.com';
const EXAMPLES = [
  {
    name: 'GET Object',
    method: 'GET', path: '/test.txt', query: '',
    headers: { Host: HOST, Range: 'bytes=0-9' },
    signature: 'f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
  },
  {
    name: 'PUT Object',
    method: 'PUT', path: '/test%24file.text', query: '',
    headers: { Host: HOST, Date: 'Fri, 24 May 2013 00:00:00 GMT', 'x-amz-storage-class': 'REDUCED_REDUNDANCY' },
    body: 'Welcome to Amazon S3.',
    payloadHash: '44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072',
    signature: '98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd',
  },
  {
    name: 'GET Bucket Lifecycle',
    method: 'GET', path: '/', query: 'lifecycle',
    signedQuery: 'lifecycle=',
    headers: { Host: HOST },
    signature: 'fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543',
  },
  {
    name: 'Get Bucket (List Objects)',
    method: 'GET', path: '/', query: 'max-keys=2&prefix=J',
    headers: { Host: HOST },
    signature: '34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7',
  },
];

const CREDS = new Map([[AWS_KEY, AWS_SECRET], [ACCESS_KEY, SECRET_KEY]]);
const OPTS = { credentials: CREDS, region: 'us-east-1', maxSkewMs: Infinity };

function toRaw(headers) {
  return Object.entries(headers).flatMap(([k, v]) => [k, v]);
}

function exampleRequest(ex) {
  const headers = rawSign({
    method: ex.method, path: ex.path, query: ex.query, signedQuery: ex.signedQuery,
    headers: ex.headers, payloadHash: ex.payloadHash ?? EMPTY_SHA256,
    accessKey: AWS_KEY, secretKey: AWS_SECRET, date: AWS_DATE,
  });
  return {
    method: ex.method, rawPath: ex.path, rawQuery: ex.query,
    rawHeaders: toRaw(headers), body: ex.body ? Buffer.from(ex.body) : null,
  };
}

for (const ex of EXAMPLES) {
  test(`AWS example "${ex.name}": the test signer reproduces AWS's signature and the verifier accepts it`, async () => {
    const req = exampleRequest(ex);
    const auth = headerMap(req.rawHeaders).get('authorization');
    assert.match(auth, new RegExp(`Signature=${ex.signature}$`));
    const v = await verifyRequest(req, OPTS);
    assert.equal(v.ok, true, v.message);
  });
}

test('AWS examples: any change to method, path, query, a signed header or the signature is rejected', async () => {
  const ex = EXAMPLES[0];
  const base = exampleRequest(ex);
  const variants = [
    { ...base, method: 'HEAD' },
    { ...base, rawPath: '/test.txt2' },
    { ...base, rawQuery: 'x=1' },
    { ...base, rawHeaders: base.rawHeaders.map((v) => (v === 'bytes=0-9' ? 'bytes=0-10' : v)) },
    { ...base, rawHeaders: base.rawHeaders.map((v) => (typeof v === 'string' && v.startsWith('AWS4-HMAC') ? v.replace(/.$/, (c) => (c === '0' ? '1' : '0')) : v)) },
  ];
  for (const req of variants) {
    const v = await verifyRequest(req, OPTS);
    assert.equal(v.ok, false);
    assert.equal(v.code, 'SignatureDoesNotMatch');
    assert.equal(v.status, 403);
  }
});

test('canonical URI: S3 rules (decode, then encode all but unreserved and "/")', () => {
  assert.equal(canonicalPath('/b/a%20b'), '/b/a%20b');
  assert.equal(canonicalPath('/b/a+b'), '/b/a%2Bb'); // '+' in a path is a plus
  assert.equal(canonicalPath('/b/day=27/hour=08'), '/b/day%3D27/hour%3D08');
  assert.equal(canonicalPath('/b/%c3%a9'), '/b/%C3%A9');
  assert.equal(canonicalPath('/b/é~!'), '/b/%C3%A9~%21');
  assert.equal(canonicalPath('/b//x/./y'), '/b//x/./y'); // no normalisation for S3
});

test('query parsing: names and values decoded, "+" is a space, repeats kept', () => {
  assert.deepEqual(parseQuery('list-type=2&prefix=a%20b+c&delimiter'), { 'list-type': '2', prefix: 'a b c', delimiter: '' });
  assert.deepEqual(parseQuery('a=2&a=1'), { a: ['2', '1'] });
  assert.deepEqual(parseQuery('continuation-token=1%2F2%2B3%3D'), { 'continuation-token': '1/2+3=' });
});

function ourRequest({ query = 'list-type=2&prefix=x', signedQuery, headers = {}, secretKey, accessKey, drop = [], path = '/bkt', date, region, includeContentSha } = {}) {
  const h = rawSign({
    path, query, signedQuery, headers: { host: '127.0.0.1:9', ...headers }, secretKey, accessKey, date, region, includeContentSha,
  });
  for (const d of drop) delete h[d];
  return { method: 'GET', rawPath: path, rawQuery: query, rawHeaders: toRaw(h), body: null };
}

test('the query must be signed sorted and encoded as S3 canonicalises it', async () => {
  const now = { ...OPTS, maxSkewMs: undefined };
  assert.equal((await verifyRequest(ourRequest(), now)).ok, true);
  // Sent and signed in another order: libcurl 7.88 signs verbatim, S3 sorts.
  let v = await verifyRequest(ourRequest({ query: 'prefix=x&list-type=2' }), now);
  assert.equal(v.code, 'SignatureDoesNotMatch');
  assert.match(v.canonicalRequest, /\nlist-type=2&prefix=x\n/);
  // Space signed as '+', lower-case escapes, '/' left raw: each differs from the canonical form.
  for (const q of ['list-type=2&prefix=a+b', 'list-type=2&prefix=%c3%a9', 'list-type=2&prefix=a/b', 'list-type=2&prefix=a%7eb']) {
    v = await verifyRequest(ourRequest({ query: q }), now);
    assert.equal(v.code, 'SignatureDoesNotMatch', q);
  }
  // Signed one way, sent another.
  v = await verifyRequest(ourRequest({ query: 'list-type=2&prefix=a%2Fb', signedQuery: 'list-type=2&prefix=a/b' }), now);
  assert.equal(v.code, 'SignatureDoesNotMatch');
  // Canonical forms of the same values pass.
  for (const q of ['list-type=2&prefix=a%20b', 'list-type=2&prefix=%C3%A9', 'list-type=2&prefix=a%2Fb', 'list-type=2&prefix=a~b', 'delimiter=%2F&list-type=2']) {
    v = await verifyRequest(ourRequest({ query: q }), now);
    assert.equal(v.ok, true, q);
  }
});

test('the SDK signer canonicalises the query itself, so its order on the wire does not matter', async () => {
  const query = { prefix: 'a b/é', 'list-type': '2', 'continuation-token': 'x+y/z=' };
  const headers = await sdkSign({ path: '/bkt', query, headers: { host: '127.0.0.1:9', 'x-amz-content-sha256': EMPTY_SHA256 } });
  const v = await verifyRequest({ method: 'GET', rawPath: '/bkt', rawQuery: serializeQuery(query), rawHeaders: toRaw(headers), body: null }, OPTS);
  assert.equal(v.ok, true, v.message);
  assert.match(v.canonicalRequest, /\ncontinuation-token=x%2By%2Fz%3D&list-type=2&prefix=a%20b%2F%C3%A9\n/);
});

test('each rejection has S3\'s status and error code', async () => {
  const o = { ...OPTS, maxSkewMs: undefined };
  const cases = [
    [ourRequest({ drop: ['Authorization'] }), 403, 'AccessDenied'],
    [ourRequest({ accessKey: 'nobody' }), 403, 'InvalidAccessKeyId'],
    [ourRequest({ secretKey: 'wrong' }), 403, 'SignatureDoesNotMatch'],
    [ourRequest({ includeContentSha: false }), 400, 'InvalidRequest'],
    [ourRequest({ region: 'eu-west-1' }), 400, 'AuthorizationHeaderMalformed'],
    [ourRequest({ date: new Date(Date.now() - 3600e3) }), 403, 'RequestTimeTooSkewed'],
    [ourRequest({ drop: ['x-amz-date'] }), 403, 'AccessDenied'],
  ];
  for (const [req, status, code] of cases) {
    const v = await verifyRequest(req, o);
    assert.deepEqual([v.ok, v.status, v.code], [false, status, code], v.message);
  }
  // An x-amz-* header that is sent but not signed.
  const req = ourRequest();
  req.rawHeaders.push('x-amz-meta-extra', '1');
  let v = await verifyRequest(req, o);
  assert.deepEqual([v.status, v.code], [403, 'AccessDenied']);
  assert.equal(v.extra.HeadersNotSigned, 'x-amz-meta-extra');
  // A tampered signed header.
  const t = ourRequest({ headers: { 'x-amz-meta-a': 'one' } });
  t.rawHeaders = t.rawHeaders.map((x) => (x === 'one' ? 'two' : x));
  v = await verifyRequest(t, o);
  assert.equal(v.code, 'SignatureDoesNotMatch');
  // A body that does not match x-amz-content-sha256.
  const b = ourRequest();
  b.body = Buffer.from('surprise');
  v = await verifyRequest(b, o);
  assert.deepEqual([v.status, v.code], [400, 'XAmzContentSHA256Mismatch']);
  // UNSIGNED-PAYLOAD skips the body check but is still signed.
  const h = rawSign({ method: 'PUT', path: '/bkt/k', headers: { host: 'h' }, payloadHash: 'UNSIGNED-PAYLOAD' });
  v = await verifyRequest({ method: 'PUT', rawPath: '/bkt/k', rawQuery: '', rawHeaders: toRaw(h), body: Buffer.from('data') }, o);
  assert.equal(v.ok, true, v.message);
});

test('computeSignature signs exactly the listed headers, including ones the SDK skips by default', async () => {
  const headers = new Map([['host', 'h'], ['user-agent', 'curl/7.88.1'], ['x-amz-date', '20240102T030405Z'], ['x-amz-content-sha256', EMPTY_SHA256]]);
  const r = await computeSignature({
    method: 'GET', rawPath: '/', rawQuery: '', headers, signedHeaders: ['host', 'user-agent', 'x-amz-content-sha256', 'x-amz-date'],
    payloadHash: EMPTY_SHA256, accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY, region: 'us-east-1', amzDate: '20240102T030405Z',
  });
  assert.equal(r.canonicalHeaderList, 'host;user-agent;x-amz-content-sha256;x-amz-date');
  const expected = rawSign({
    path: '/', headers: { host: 'h', 'user-agent': 'curl/7.88.1' }, date: new Date(Date.UTC(2024, 0, 2, 3, 4, 5)),
  }).Authorization.split('Signature=')[1];
  assert.equal(r.signature, expected);
});
