// SigV4 verification for the S3 test proxy (test/s3/server.mjs).
//
// The proxy must not trust the client's own idea of what it signed: it
// rebuilds the canonical request from what arrived on the wire (method, path,
// query, the headers named in SignedHeaders, x-amz-content-sha256) with the
// AWS SDK's signer (@smithy/signature-v4) and compares signatures exactly.
// Checks, in the order real S3 applies them, are listed in README.md.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const {
  SignatureV4,
  getCanonicalHeaders,
  createScope,
  ALGORITHM_IDENTIFIER,
} = require('@smithy/signature-v4');
const { Hash } = require('@smithy/hash-node');

export const EMPTY_SHA256 =
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
export const MAX_SKEW_MS = 15 * 60 * 1000;

const UNRESERVED = /[A-Za-z0-9\-._~]/;

const isHex = (b) => (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

// Percent-decodes a string to bytes; '+' becomes a space when plusIsSpace
// (query strings, as s3rver and most S3 servers read them) and stays '+' in
// paths. Malformed escapes are kept literally.
function percentDecodeBytes(s, plusIsSpace) {
  const out = [];
  const raw = Buffer.from(s, 'utf8');
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (c === 0x25 && i + 2 < raw.length && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      out.push(parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16));
      i += 2;
    } else if (c === 0x2b && plusIsSpace) {
      out.push(0x20);
    } else {
      out.push(c);
    }
  }
  return Buffer.from(out);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

// Percent-decodes to a UTF-8 string; throws on bytes that are not UTF-8.
export function percentDecode(s, plusIsSpace = false) {
  return utf8.decode(percentDecodeBytes(s, plusIsSpace));
}

// AWS's URI encoding: every byte except A-Z a-z 0-9 - . _ ~ as %XX (upper
// case); '/' kept when keepSlash.
export function awsUriEncode(str, keepSlash = false) {
  let out = '';
  for (const b of Buffer.from(str, 'utf8')) {
    const ch = String.fromCharCode(b);
    if (UNRESERVED.test(ch) || (keepSlash && ch === '/')) out += ch;
    else out += '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

// S3's canonical URI: the path as S3 understands it (decoded), encoded again
// by the rules above. S3 does not normalise '.', '..' or '//'.
export function canonicalPath(rawPath) {
  return awsUriEncode(percentDecode(rawPath || '/', false), true);
}

// A raw query string as an object of decoded names to decoded values (an
// array when a name repeats), the form the SDK's getCanonicalQuery takes.
export function parseQuery(rawQuery) {
  const query = {};
  if (!rawQuery) return query;
  for (const part of rawQuery.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = percentDecode(eq < 0 ? part : part.slice(0, eq), true);
    const value = eq < 0 ? '' : percentDecode(part.slice(eq + 1), true);
    if (Object.prototype.hasOwnProperty.call(query, name)) {
      query[name] = [].concat(query[name], value);
    } else {
      query[name] = value;
    }
  }
  return query;
}

// Node's rawHeaders ([name, value, ...]) as lower-case name -> value, with
// repeated headers joined by ',' as SigV4 prescribes.
export function headerMap(rawHeaders) {
  const map = new Map();
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    const value = String(rawHeaders[i + 1]).trim();
    map.set(name, map.has(name) ? `${map.get(name)},${value}` : value);
  }
  return map;
}

// Parses "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...".
export function parseAuthorization(value) {
  const m = /^(\S+)\s+(.*)$/s.exec(value.trim());
  if (!m) return { algorithm: value.trim() };
  const parts = {};
  for (const piece of m[2].split(',')) {
    const t = piece.trim();
    const eq = t.indexOf('=');
    if (eq > 0) parts[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return { algorithm: m[1], ...parts };
}

function fail(status, code, message, extra = {}) {
  return { ok: false, status, code, message, extra };
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  if (!m) return null;
  const t = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
  return Number.isNaN(t) ? null : t;
}

// The signature the SDK computes for this request, with the canonical
// request and string to sign (for error messages and logs).
export async function computeSignature({
  method, rawPath, rawQuery, headers, signedHeaders, payloadHash,
  accessKeyId, secretAccessKey, region, service = 's3', amzDate,
}) {
  const signer = new SignatureV4({
    credentials: { accessKeyId, secretAccessKey },
    region,
    service,
    sha256: Hash.bind(null, 'sha256'),
    uriEscapePath: false, // S3: the canonical URI is the (encoded) path itself
    applyChecksum: false,
  });
  const picked = {};
  for (const name of signedHeaders) picked[name] = headers.get(name);
  const request = {
    method,
    protocol: 'http:',
    hostname: '',
    path: canonicalPath(rawPath),
    query: parseQuery(rawQuery),
    headers: picked,
  };
  // The headers the client listed, no more and no fewer: signableHeaders
  // lets the SDK include names it would otherwise skip (user-agent, ...).
  const canonicalHeaders = getCanonicalHeaders(request, undefined, new Set(signedHeaders));
  const canonicalRequest = signer.createCanonicalRequest(request, canonicalHeaders, payloadHash);
  const shortDate = amzDate.slice(0, 8);
  const scope = createScope(shortDate, region, service);
  const stringToSign = await signer.createStringToSign(amzDate, scope, canonicalRequest, ALGORITHM_IDENTIFIER);
  const signature = await signer.getSignature(
    amzDate, scope,
    signer.getSigningKey({ accessKeyId, secretAccessKey }, region, shortDate, service),
    canonicalRequest,
  );
  return { signature, canonicalRequest, stringToSign, canonicalHeaderList: Object.keys(canonicalHeaders).sort().join(';') };
}

/**
 * Verifies one request's SigV4 Authorization header.
 *
 * req: { method, rawPath, rawQuery, rawHeaders, body (Buffer|null) }
 * opts: { credentials: Map(accessKeyId -> secretAccessKey), region,
 *         sessionToken (required x-amz-security-token, optional),
 *         now (ms, default Date.now()), maxSkewMs (default 15 min; Infinity
 *         disables), checkPayload (default true) }
 *
 * Returns { ok: true, accessKeyId, signedHeaders, ... } or
 * { ok: false, status, code, message, extra, canonicalRequest?, stringToSign? }.
 */
export async function verifyRequest(req, opts) {
  const headers = headerMap(req.rawHeaders);
  const auth = headers.get('authorization');
  let queryObj;
  try {
    queryObj = parseQuery(req.rawQuery);
  } catch {
    return fail(400, 'InvalidURI', "Couldn't parse the specified URI.");
  }
  if (auth === undefined) {
    if ('X-Amz-Algorithm' in queryObj || 'X-Amz-Signature' in queryObj) {
      return fail(403, 'AccessDenied', 'Presigned (query-string) authentication is not supported by this test server; use the Authorization header.');
    }
    return fail(403, 'AccessDenied', 'Access Denied');
  }
  const a = parseAuthorization(auth);
  if (a.algorithm !== ALGORITHM_IDENTIFIER) {
    return fail(400, 'InvalidRequest', 'The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.');
  }
  for (const part of ['Credential', 'SignedHeaders', 'Signature']) {
    if (!a[part]) {
      return fail(400, 'AuthorizationHeaderMalformed',
        `The authorization header is malformed; missing ${part}.`);
    }
  }
  const cred = a.Credential.split('/');
  if (cred.length !== 5) {
    return fail(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`);
  }
  const [accessKeyId, credDate, credRegion, credService, terminator] = cred;
  const secretAccessKey = opts.credentials.get(accessKeyId);
  if (secretAccessKey === undefined) {
    return fail(403, 'InvalidAccessKeyId',
      'The AWS Access Key Id you provided does not exist in our records.',
      { AWSAccessKeyId: accessKeyId });
  }
  const payloadHash = headers.get('x-amz-content-sha256');
  if (payloadHash === undefined) {
    return fail(400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256');
  }
  if (!/^([0-9a-fA-F]{64}|UNSIGNED-PAYLOAD|STREAMING-[A-Z0-9-]+)$/.test(payloadHash)) {
    return fail(400, 'InvalidArgument',
      'x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.',
      { ArgumentName: 'x-amz-content-sha256', ArgumentValue: payloadHash });
  }
  const amzDate = headers.get('x-amz-date');
  const t = parseAmzDate(amzDate);
  if (t === null) {
    return fail(403, 'AccessDenied', 'AWS authentication requires a valid Date or x-amz-date header');
  }
  if (credDate !== amzDate.slice(0, 8)) {
    return fail(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; Invalid credential date "${credDate}". This date is not the same as X-Amz-Date: "${amzDate.slice(0, 8)}".`);
  }
  if (credRegion !== opts.region) {
    return fail(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; the region '${credRegion}' is wrong; expecting '${opts.region}'`,
      { Region: opts.region });
  }
  if (credService !== 's3' || terminator !== 'aws4_request') {
    return fail(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; incorrect service "${credService}" or terminator "${terminator}"; expecting "s3" and "aws4_request".`);
  }
  const now = opts.now ?? Date.now();
  const maxSkew = opts.maxSkewMs ?? MAX_SKEW_MS;
  if (Math.abs(now - t) > maxSkew) {
    return fail(403, 'RequestTimeTooSkewed',
      'The difference between the request time and the current time is too large.',
      { RequestTime: amzDate, ServerTime: new Date(now).toISOString(), MaxAllowedSkewMilliseconds: String(maxSkew) });
  }
  const signedHeaders = a.SignedHeaders.split(';');
  const required = ['host', 'x-amz-content-sha256', 'x-amz-date'];
  const unsigned = [...headers.keys()].filter(
    (n) => (n.startsWith('x-amz-') || required.includes(n)) && !signedHeaders.includes(n));
  if (unsigned.length) {
    return fail(403, 'AccessDenied', 'There were headers present in the request which were not signed',
      { HeadersNotSigned: unsigned.join(', ') });
  }
  const absent = signedHeaders.filter((n) => !headers.has(n));
  if (absent.length) {
    return fail(403, 'SignatureDoesNotMatch',
      `The request signature we calculated does not match the signature you provided. SignedHeaders names headers that were not sent: ${absent.join(', ')}`,
      { AWSAccessKeyId: accessKeyId });
  }
  if (opts.sessionToken !== undefined && opts.sessionToken !== null) {
    if (headers.get('x-amz-security-token') !== opts.sessionToken) {
      return fail(400, 'InvalidToken', 'The provided token is malformed or otherwise invalid.');
    }
  }
  let computed;
  try {
    computed = await computeSignature({
      method: req.method, rawPath: req.rawPath, rawQuery: req.rawQuery, headers,
      signedHeaders, payloadHash, accessKeyId, secretAccessKey,
      region: opts.region, amzDate,
    });
  } catch (e) {
    return fail(400, 'InvalidURI', `Couldn't parse the specified URI: ${e.message}`);
  }
  const given = Buffer.from(a.Signature, 'utf8');
  const want = Buffer.from(computed.signature, 'utf8');
  const sameList = computed.canonicalHeaderList === a.SignedHeaders;
  if (!sameList || given.length !== want.length || !timingSafeEqual(given, want)) {
    return {
      ...fail(403, 'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
        {
          AWSAccessKeyId: accessKeyId,
          StringToSign: computed.stringToSign,
          SignatureProvided: a.Signature,
          CanonicalRequest: computed.canonicalRequest,
          ...(sameList ? {} : { SignedHeadersExpected: computed.canonicalHeaderList }),
        }),
      canonicalRequest: computed.canonicalRequest,
      stringToSign: computed.stringToSign,
    };
  }
  if (payloadHash.startsWith('STREAMING-')) {
    return fail(501, 'NotImplemented', 'Streaming (aws-chunked) uploads are not supported by this test server.');
  }
  if ((opts.checkPayload ?? true) && payloadHash !== 'UNSIGNED-PAYLOAD') {
    const actual = createHash('sha256').update(req.body || Buffer.alloc(0)).digest('hex');
    if (actual !== payloadHash.toLowerCase()) {
      return fail(400, 'XAmzContentSHA256Mismatch',
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
        { ClientComputedContentSHA256: payloadHash, S3ComputedContentSHA256: actual });
    }
  }
  return {
    ok: true, accessKeyId, signedHeaders, amzDate,
    canonicalRequest: computed.canonicalRequest, stringToSign: computed.stringToSign,
  };
}
