// Helpers for the node:test suites in test/s3/ (not a test file itself).
import { spawn } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { SignatureV4 } = require('@smithy/signature-v4');
const { Hash } = require('@smithy/hash-node');

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SERVER = path.join(HERE, 'server.mjs');
export const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
export const ACCESS_KEY = 'finalizetest';
export const SECRET_KEY = 'finalizetestsecret';
export const REGION = 'us-east-1';

/**
 * Starts server.mjs on a free port; resolves once its ready line is out.
 * Returns { port, endpoint, dir, proc, stderr(), control(method, path, body), stop() }.
 */
export async function startServer(extraArgs = []) {
  const dir = mkdtempSync(path.join(tmpdir(), 's3-test-'));
  const proc = spawn(process.execPath, [SERVER, '--port', '0', '--dir', dir, '--parent-pid', String(process.pid), ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr.on('data', (c) => { err += c; });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${err}`)), 20000);
    proc.stdout.on('data', (c) => {
      out += c;
      const m = /s3-server listening on 127\.0\.0\.1:(\d+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}): ${err}`));
    });
  });
  proc.removeAllListeners('exit');
  const endpoint = `http://127.0.0.1:${port}`;
  const server = {
    port, endpoint, dir, proc,
    stderr: () => err,
    async control(method, p, body) {
      // A fixture, not what a test checks: 2,500 objects written under CI's load once took over 30 s.
      const r = await send({
        port, method, path: p, body: body === undefined ? undefined
          : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body)),
        timeoutMs: 120000,
      });
      const text = r.body.toString('utf8');
      const json = text ? JSON.parse(text) : null;
      if (r.status !== 200) throw new Error(`${method} ${p}: ${r.status} ${text}`);
      return json;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
        proc.kill('SIGTERM');
        server.exit = await exited;
      }
      rmSync(dir, { recursive: true, force: true });
      return server.exit;
    },
  };
  return server;
}

/** One HTTP request; resolves { status, headers, body } (body a Buffer). */
export function send({ port, host = '127.0.0.1', method = 'GET', path: p, headers = {}, body, timeoutMs = 30000 }) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host, port, method, path: p, headers, agent: false, setHost: !hasHeader(headers, 'host'),
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
      res.on('aborted', () => reject(Object.assign(new Error('response aborted'), { partial: Buffer.concat(chunks), headers: res.headers })));
    });
    req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error('client timeout'), { code: 'CLIENT_TIMEOUT' })));
    req.on('error', reject);
    req.end(body);
  });
}

function hasHeader(headers, name) {
  return Object.keys(headers).some((h) => h.toLowerCase() === name);
}

const sha256hex = (data) => createHash('sha256').update(data).digest('hex');
const hmac = (key, data) => createHmac('sha256', key).update(data).digest();

export function amzDate(d = new Date()) {
  return d.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
}

/** AWS URI encoding (RFC 3986 unreserved kept, upper-case hex), '/' kept if asked. */
export function uriEncode(s, keepSlash = false) {
  return Array.from(Buffer.from(s, 'utf8'), (b) => {
    const ch = String.fromCharCode(b);
    return /[A-Za-z0-9\-._~]/.test(ch) || (keepSlash && ch === '/') ? ch : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }).join('');
}

/** A canonical (sorted, encoded) query string from [[name, value], ...]. */
export function canonicalQuery(pairs) {
  return pairs.map(([k, v]) => [uriEncode(k), uriEncode(v)])
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`).join('&');
}

/**
 * A hand-written SigV4 signer that, like libcurl 7.88's CURLOPT_AWS_SIGV4,
 * signs the path and query string exactly as given (no sorting, no
 * re-encoding). Independent of the SDK. Returns the headers to send
 * (Authorization, x-amz-date plus the ones given).
 *
 * opts: { method, path, query (string as sent), headers ({name: value}, must
 * include host), payloadHash, accessKey, secretKey, region, date,
 * signedQuery (what to sign instead of query), signedPath }
 */
export function rawSign({
  method = 'GET', path: p, query = '', headers, payloadHash = EMPTY_SHA256,
  accessKey = ACCESS_KEY, secretKey = SECRET_KEY, region = REGION, date = new Date(),
  signedQuery, signedPath, includeContentSha = true,
}) {
  const longDate = amzDate(date);
  const shortDate = longDate.slice(0, 8);
  const all = { ...headers, 'x-amz-date': longDate };
  if (includeContentSha) all['x-amz-content-sha256'] = payloadHash;
  const names = Object.keys(all).map((n) => n.toLowerCase()).sort();
  const lower = Object.fromEntries(Object.entries(all).map(([k, v]) => [k.toLowerCase(), String(v).trim().replace(/\s+/g, ' ')]));
  const canonicalRequest = [
    method,
    signedPath ?? p,
    signedQuery ?? query,
    ...names.map((n) => `${n}:${lower[n]}`),
    '',
    names.join(';'),
    payloadHash,
  ].join('\n');
  const scope = `${shortDate}/${region}/s3/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', longDate, scope, sha256hex(canonicalRequest)].join('\n');
  let key = hmac(`AWS4${secretKey}`, shortDate);
  for (const part of [region, 's3', 'aws4_request']) key = hmac(key, part);
  const signature = createHmac('sha256', key).update(stringToSign).digest('hex');
  return {
    ...all,
    Authorization: `AWS4-HMAC-SHA256 Credential=${accessKey}/${scope}, SignedHeaders=${names.join(';')}, Signature=${signature}`,
  };
}

/**
 * Signs with the AWS SDK's own signer (@smithy/signature-v4), the way the
 * SDK's S3 client does: the query as an object of decoded values, the path
 * already URI-encoded. Returns the headers to send.
 */
export async function sdkSign({
  method = 'GET', path: p, query = {}, headers, accessKey = ACCESS_KEY, secretKey = SECRET_KEY,
  region = REGION, body,
}) {
  const signer = new SignatureV4({
    credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
    region, service: 's3', sha256: Hash.bind(null, 'sha256'), uriEscapePath: false, applyChecksum: true,
  });
  const signed = await signer.sign({
    method, protocol: 'http:', hostname: '127.0.0.1', path: p, query, headers: { ...headers }, body,
  });
  return signed.headers;
}

/** The query object serialised in insertion order (as the SDK's HTTP handler sends it). */
export function serializeQuery(query) {
  return Object.entries(query).map(([k, v]) => `${uriEncode(k)}=${uriEncode(v)}`).join('&');
}

function xmlUnescape(s) {
  return s.replace(/&(lt|gt|amp|quot|apos|#(\d+)|#x([0-9a-fA-F]+));/g, (m, name, dec, hex) => {
    if (dec) return String.fromCodePoint(Number(dec));
    if (hex) return String.fromCodePoint(parseInt(hex, 16));
    return { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" }[name];
  });
}

/** The fields of a ListBucketResult the tests need (small, regular XML from s3rver). */
export function parseListing(xml) {
  const text = xml.toString('utf8');
  if (!/<ListBucketResult[ >]/.test(text) || !/<\/ListBucketResult>\s*$/.test(text)) {
    throw new Error(`not a ListBucketResult: ${text.slice(0, 200)}`);
  }
  const one = (tag) => {
    const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(text);
    return m ? xmlUnescape(m[1]) : null;
  };
  const contents = [...text.matchAll(/<Contents>(.*?)<\/Contents>/gs)].map((m) => {
    const c = m[1];
    const f = (tag) => xmlUnescape((new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(c) || [])[1] ?? '');
    return { key: f('Key'), size: Number(f('Size')), etag: f('ETag') };
  });
  return {
    isTruncated: one('IsTruncated') === 'true',
    nextToken: one('NextContinuationToken'),
    keyCount: one('KeyCount') === null ? null : Number(one('KeyCount')),
    contents,
    keys: contents.map((c) => c.key),
  };
}

/** The <Code> and <Message> of an S3 error document. */
export function parseError(xml) {
  const text = xml.toString('utf8');
  const f = (tag) => {
    const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(text);
    return m ? xmlUnescape(m[1]) : null;
  };
  return { code: f('Code'), message: f('Message'), canonicalRequest: f('CanonicalRequest'), text };
}

/**
 * A ListObjectsV2 request signed the libcurl way (sorted, encoded query built
 * by the caller) against the server; returns the response.
 */
export async function listV2(server, bucket, params = [], { style = 'path', sign = 'raw', ...extra } = {}) {
  const host = style === 'path' ? `127.0.0.1:${server.port}` : `${bucket}.${style === 's3' ? 's3.' : ''}localhost:${server.port}`;
  const p = style === 'path' ? `/${bucket}` : '/';
  const pairs = [['list-type', '2'], ...params];
  let headers;
  let query;
  if (sign === 'sdk') {
    const q = Object.fromEntries(pairs);
    query = serializeQuery(q);
    headers = await sdkSign({ path: p, query: q, headers: { host, 'x-amz-content-sha256': EMPTY_SHA256 } });
  } else {
    query = canonicalQuery(pairs);
    headers = rawSign({ path: p, query, headers: { host }, ...extra });
  }
  return send({ port: server.port, path: `${p}?${query}`, headers });
}
