// What the proxy makes of libcurl's own SigV4 signing (CURLOPT_AWS_SIGV4,
// through the curl command of the same libcurl the extension links). These
// pin down what the C client has to do; they skip where curl is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { startServer, parseListing, parseError, canonicalQuery, uriEncode, EMPTY_SHA256 } from './helpers.mjs';

let curlVersion = null;
try {
  curlVersion = execFileSync('curl', ['--version'], { encoding: 'utf8' }).split('\n')[0];
} catch {
  curlVersion = null;
}
const skip = curlVersion && /\blibcurl\/(\d+)\.(\d+)/.test(curlVersion)
  && (([, a, b]) => Number(a) * 100 + Number(b) >= 775)(/\blibcurl\/(\d+)\.(\d+)/.exec(curlVersion))
  ? false : 'needs the curl command with libcurl >= 7.75 (--aws-sigv4)';

let s3;
const BUCKET = 'curl-test';
const KEYS = ['day=27/hour=08/a b.csv', 'day=27/hour=08/ü+.csv'];

before(async () => {
  if (skip) return;
  s3 = await startServer();
  await s3.control('POST', `/__control/bucket?name=${BUCKET}`);
  await s3.control('POST', `/__control/objects?bucket=${BUCKET}`, {
    objects: [...KEYS.map((key) => ({ key, data: key })), ...Array.from({ length: 1005 }, (_, i) => ({ key: `many/${String(i).padStart(4, '0')}`, size: 1 }))],
  });
});

after(async () => {
  if (s3) await s3.stop();
});

// Runs curl with SigV4 like the extension will; resolves { status, body }.
function curl(url, { sha = true, user = 'finalizetest:finalizetestsecret', extra = [] } = {}) {
  const args = ['-sS', '--aws-sigv4', 'aws:amz:us-east-1:s3', '--user', user, '-w', '\n%{http_code}', ...extra];
  if (sha) args.push('-H', `x-amz-content-sha256: ${EMPTY_SHA256}`);
  args.push(url);
  return new Promise((resolve, reject) => {
    execFile('curl', args, { encoding: 'utf8', maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`curl failed: ${stderr || err.message}`));
      const i = stdout.lastIndexOf('\n');
      return resolve({ status: Number(stdout.slice(i + 1)), body: stdout.slice(0, i) });
    });
  });
}

test('libcurl: a sorted, percent-encoded query with x-amz-content-sha256 is accepted (path style)', { skip }, async () => {
  const q = canonicalQuery([['list-type', '2'], ['prefix', 'day=27/hour=08/']]);
  const r = await curl(`${s3.endpoint}/${BUCKET}?${q}`);
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(parseListing(Buffer.from(r.body)).keys, KEYS);
  const e = (await s3.control('GET', '/__control/requests')).at(-1);
  assert.equal(e.signature_ok, true);
  assert.equal(e.signed_headers, 'host;x-amz-content-sha256;x-amz-date');
});

test('libcurl: virtual-hosted style at http://<bucket>.localhost:<port>/ resolves to loopback and is accepted', { skip }, async () => {
  const q = canonicalQuery([['list-type', '2'], ['prefix', 'day=27/']]);
  for (const host of [`${BUCKET}.localhost`, `${BUCKET}.s3.localhost`]) {
    const r = await curl(`http://${host}:${s3.port}/?${q}`);
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(parseListing(Buffer.from(r.body)).keys, KEYS);
  }
  // The same through --connect-to (CURLOPT_CONNECT_TO) with any host name.
  const r = await curl(`http://${BUCKET}.s3.example.test/?${q}`, { extra: ['--connect-to', `::127.0.0.1:${s3.port}`] });
  // Only *.localhost names are virtual hosts; any other Host is path style,
  // so "/" is the service (ListBuckets), not the bucket.
  assert.equal(r.status, 200, r.body);
  assert.match(r.body, /<ListAllMyBucketsResult/);
  assert.equal((await s3.control('GET', '/__control/requests')).at(-1).style, 'path');
  const r2 = await curl(`http://${BUCKET}.localhost/?${q}`, { extra: ['--connect-to', `::127.0.0.1:${s3.port}`] });
  assert.equal(r2.status, 200, r2.body);
});

test('libcurl 7.88 signs the query verbatim: unsorted parameters are rejected', { skip }, async () => {
  const r = await curl(`${s3.endpoint}/${BUCKET}?prefix=day&list-type=2`);
  if (r.status === 200) {
    // A newer libcurl (>= 8.x) sorts the query itself; nothing to pin down then.
    assert.doesNotMatch(curlVersion, /libcurl\/7\./);
    return;
  }
  assert.equal(r.status, 403);
  assert.equal(parseError(Buffer.from(r.body)).code, 'SignatureDoesNotMatch');
});

test('libcurl: a space sent as "+" or a raw "=" in the path fails; %20 and %3D pass', { skip }, async () => {
  let r = await curl(`${s3.endpoint}/${BUCKET}?list-type=2&prefix=day%3D27%2Fhour%3D08%2Fa+b`);
  assert.equal(r.status, 403, r.body);
  r = await curl(`${s3.endpoint}/${BUCKET}?list-type=2&prefix=day%3D27%2Fhour%3D08%2Fa%20b`);
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(parseListing(Buffer.from(r.body)).keys, [KEYS[0]]);
  r = await curl(`${s3.endpoint}/${BUCKET}/day=27/hour=08/a%20b.csv`);
  assert.equal(r.status, 403, r.body);
  r = await curl(`${s3.endpoint}/${BUCKET}/${uriEncode(KEYS[1], true)}`);
  assert.equal(r.status, 200, r.body);
  assert.equal(r.body, KEYS[1]);
});

test('libcurl: without an explicit x-amz-content-sha256 header the request is rejected', { skip }, async () => {
  const r = await curl(`${s3.endpoint}/${BUCKET}?list-type=2`, { sha: false });
  assert.equal(r.status, 400);
  assert.equal(parseError(Buffer.from(r.body)).code, 'InvalidRequest');
  const e = (await s3.control('GET', '/__control/requests')).at(-1);
  assert.match(e.authorization, /SignedHeaders=host;x-amz-date,/);
});

test('libcurl: a wrong secret is rejected', { skip }, async () => {
  const r = await curl(`${s3.endpoint}/${BUCKET}?list-type=2`, { user: 'finalizetest:nope' });
  assert.equal(r.status, 403);
  assert.equal(parseError(Buffer.from(r.body)).code, 'SignatureDoesNotMatch');
});

test('libcurl: paging with the continuation token percent-encoded', { skip }, async () => {
  const keys = [];
  let token = null;
  let pages = 0;
  do {
    const pairs = [['list-type', '2'], ['prefix', 'many/']];
    if (token) pairs.push(['continuation-token', token]);
    const r = await curl(`${s3.endpoint}/${BUCKET}?${canonicalQuery(pairs)}`);
    assert.equal(r.status, 200, r.body);
    const l = parseListing(Buffer.from(r.body));
    keys.push(...l.keys);
    token = l.isTruncated ? l.nextToken : null;
    pages += 1;
  } while (token);
  assert.equal(pages, 2);
  assert.equal(keys.length, 1005);
  assert.equal(new Set(keys).size, 1005);
});
