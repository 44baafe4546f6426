#!/usr/bin/env node
// S3-compatible test server for finalize: s3rver behind a SigV4-verifying proxy.
//
//   node test/s3/server.mjs --port P --dir D [--access-key K --secret-key S
//        --region R --session-token T --max-skew-seconds N --parent-pid PID]
//
// s3rver listens on an internal loopback port with its buckets in D; this
// process listens on 127.0.0.1:P (0 = any free port), checks the SigV4
// signature of every S3 request with the AWS SDK's signer (sigv4.mjs),
// answers bad ones as S3 does (403 SignatureDoesNotMatch, ...), forwards good
// ones to s3rver, logs each request as a JSON line in D/requests.log, and
// offers an unsigned JSON control API under /__control/ (buckets, objects,
// injected faults, the request log). See README.md.
//
// Ready line on stdout: "s3-server listening on 127.0.0.1:<port>".
import crypto from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);

// s3rver's ListObjectsV2 continuation tokens use DES, which OpenSSL 3 only
// offers through its legacy provider: re-exec with --openssl-legacy-provider
// when DES is not available in this process.
function desAvailable() {
  try {
    crypto.createCipheriv('des', Buffer.alloc(8), Buffer.alloc(8));
    return true;
  } catch {
    return false;
  }
}

if (desAvailable()) {
  main().catch((e) => {
    process.stderr.write(`s3-server: ${e.stack || e}\n`);
    process.exit(1);
  });
} else if (process.env.FINALIZE_S3_SERVER_REEXEC) {
  process.stderr.write('s3-server: DES is unavailable even with --openssl-legacy-provider; s3rver cannot paginate\n');
  process.exit(1);
} else {
  const child = spawn(process.execPath,
    ['--openssl-legacy-provider', ...process.execArgv, SELF, ...process.argv.slice(2)],
    { stdio: ['inherit', 'inherit', 'inherit', 'ipc'], env: { ...process.env, FINALIZE_S3_SERVER_REEXEC: '1' } });
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    process.on(sig, () => child.kill(sig));
  }
  child.on('exit', (code, signal) => process.exit(code ?? (signal === 'SIGTERM' || signal === 'SIGINT' ? 0 : 1)));
}

async function main() {
  const fs = await import('node:fs');
  const fsp = await import('node:fs/promises');
  const http = await import('node:http');
  const path = await import('node:path');
  const { parseArgs } = await import('node:util');
  const { createRequire } = await import('node:module');
  const { verifyRequest, awsUriEncode, EMPTY_SHA256, MAX_SKEW_MS } = await import('./sigv4.mjs');
  const require = createRequire(import.meta.url);
  const S3rver = require('s3rver');
  const { SignatureV4 } = require('@smithy/signature-v4');
  const { Hash } = require('@smithy/hash-node');

  const { values: args } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      dir: { type: 'string' },
      'access-key': { type: 'string', default: 'finalizetest' },
      'secret-key': { type: 'string', default: 'finalizetestsecret' },
      region: { type: 'string', default: 'us-east-1' },
      'session-token': { type: 'string' },
      'max-skew-seconds': { type: 'string' },
      'parent-pid': { type: 'string' },
    },
  });
  if (!args.dir) {
    process.stderr.write('usage: node test/s3/server.mjs --port P --dir D [--access-key K --secret-key S --region R]\n');
    process.exit(2);
  }
  const dir = path.resolve(args.dir);
  fs.mkdirSync(dir, { recursive: true });
  const logPath = path.join(dir, 'requests.log');
  const region = args.region;
  const credentials = new Map([[args['access-key'], args['secret-key']]]);
  const maxSkewMs = args['max-skew-seconds'] !== undefined ? Number(args['max-skew-seconds']) * 1000 : MAX_SKEW_MS;

  // --- s3rver on an internal port ------------------------------------------
  const s3rver = new S3rver({
    address: '127.0.0.1',
    port: 0,
    directory: dir,
    silent: true,
    vhostBuckets: false, // the proxy turns virtual-hosted requests into path style
  });
  const inner = await s3rver.run();
  const upstreamPort = inner.port;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
  // s3rver knows only its own account (S3RVER/S3RVER); verified requests are
  // re-signed with it (s3rver does not check SigV4 signatures either way).
  const innerSigner = new SignatureV4({
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    region: 'us-east-1',
    service: 's3',
    sha256: Hash.bind(null, 'sha256'),
    uriEscapePath: false,
  });

  // --- state ---------------------------------------------------------------
  let faults = []; // { id, kind, count, match, ... }
  let nextFaultId = 1;
  let requests = [];
  let seq = 0;
  // Written synchronously: a test that reads the file right after a response
  // must find that request's line (a WriteStream flushes later).
  const logFd = fs.openSync(logPath, 'a');
  const sockets = new Set();

  function logRequest(entry) {
    requests.push(entry);
    if (requests.length > 100000) requests = requests.slice(-50000);
    fs.writeSync(logFd, JSON.stringify(entry) + '\n');
  }

  const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host', 'authorization', 'content-length', 'expect']);

  function requestId() {
    return crypto.randomBytes(8).toString('hex').toUpperCase();
  }

  function xmlEscape(s) {
    return String(s).replace(/[<>&'"\r\n]/g, (c) => ({
      '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;', '\r': '&#13;', '\n': '&#10;',
    }[c]));
  }

  // S3's error document.
  function errorXml(code, message, resource, extra = {}, rid = requestId()) {
    let x = '<?xml version="1.0" encoding="UTF-8"?>\n<Error>';
    x += `<Code>${xmlEscape(code)}</Code><Message>${xmlEscape(message)}</Message>`;
    for (const [k, v] of Object.entries(extra)) {
      if (v !== undefined && v !== null) x += `<${k}>${xmlEscape(v)}</${k}>`;
    }
    if (resource !== undefined) x += `<Resource>${xmlEscape(resource)}</Resource>`;
    x += `<RequestId>${rid}</RequestId><HostId>${crypto.randomBytes(12).toString('base64')}</HostId></Error>`;
    return x;
  }

  function sendError(res, status, code, message, resource, extra) {
    const rid = requestId();
    const body = Buffer.from(errorXml(code, message, resource, extra, rid));
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, {
      'Content-Type': 'application/xml',
      'Content-Length': body.length,
      'x-amz-request-id': rid,
      Server: 'AmazonS3',
    });
    res.end(body);
  }

  function sendJson(res, status, obj) {
    const body = Buffer.from(JSON.stringify(obj));
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  }

  function readBody(req, limit = 512 * 1024 * 1024) {
    return new Promise((resolve, reject) => {
      const chunks = [];
      let size = 0;
      req.on('data', (c) => {
        size += c.length;
        if (size > limit) {
          reject(Object.assign(new Error('request body too large'), { tooLarge: true }));
          req.destroy();
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => resolve(Buffer.concat(chunks)));
      req.on('error', reject);
    });
  }

  // Splits "Host: <bucket>.localhost:P" (or <bucket>.s3.localhost) into the
  // bucket; everything else (127.0.0.1, localhost, s3.localhost, [::1]) is
  // path style.
  function addressing(hostHeader) {
    const host = String(hostHeader || '').toLowerCase().replace(/:\d+$/, '');
    if (host.endsWith('.localhost') && host !== 's3.localhost') {
      let bucket = host.slice(0, -'.localhost'.length);
      if (bucket.endsWith('.s3')) bucket = bucket.slice(0, -'.s3'.length);
      if (bucket) return { style: 'virtual', bucket };
    }
    return { style: 'path', bucket: null };
  }

  // One request to s3rver, signed with the SDK (used by the control API and
  // for forwarding). Returns the http.ClientRequest; the caller ends it.
  async function upstreamRequest({ method, rawPath, rawQuery, headers = {}, body }) {
    const hdrs = { ...headers, host: `127.0.0.1:${upstreamPort}` };
    if (!Object.keys(hdrs).some((h) => h.toLowerCase() === 'x-amz-content-sha256')) {
      hdrs['x-amz-content-sha256'] = body && body.length
        ? crypto.createHash('sha256').update(body).digest('hex') : EMPTY_SHA256;
    }
    if (body && body.length) hdrs['content-length'] = String(body.length);
    else if (method === 'PUT' || method === 'POST') hdrs['content-length'] = '0';
    const signed = await innerSigner.sign({
      method, protocol: 'http:', hostname: '127.0.0.1', port: upstreamPort,
      path: rawPath, query: {}, headers: hdrs,
    });
    return http.request({
      host: '127.0.0.1', port: upstreamPort, method, agent,
      path: rawPath + (rawQuery ? `?${rawQuery}` : ''),
      headers: signed.headers,
    });
  }

  // A request to s3rver for the control API, fully buffered. s3rver may
  // close a kept-alive socket just as a request goes out on it ("socket
  // hang up", ECONNRESET): the control API's calls are idempotent (PUT,
  // GET, DELETE of a whole object), so such a call is sent once more.
  async function upstreamCall(method, rawPath, body, headers) {
    try {
      return await upstreamCallOnce(method, rawPath, body, headers);
    } catch (e) {
      if (e.code !== 'ECONNRESET' || method === 'POST') throw e;
      return upstreamCallOnce(method, rawPath, body, headers);
    }
  }

  async function upstreamCallOnce(method, rawPath, body, headers) {
    const ureq = await upstreamRequest({ method, rawPath, rawQuery: '', body, headers });
    return new Promise((resolve, reject) => {
      ureq.on('response', (ures) => {
        const chunks = [];
        ures.on('data', (c) => chunks.push(c));
        ures.on('end', () => resolve({ status: ures.statusCode, headers: ures.headers, body: Buffer.concat(chunks) }));
        ures.on('error', reject);
      });
      ureq.on('error', reject);
      ureq.end(body && body.length ? body : undefined);
    });
  }

  function objectPath(bucket, key) {
    return `/${bucket}/${awsUriEncode(key, true)}`;
  }

  function xmlField(xml, tag) {
    const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(xml);
    return m ? m[1] : null;
  }

  // ---- faults -------------------------------------------------------------
  const FAULT_DEFAULTS = {
    500: ['InternalError', 'We encountered an internal error. Please try again.'],
    503: ['SlowDown', 'Please reduce your request rate.'],
    403: ['AccessDenied', 'Access Denied'],
    404: ['NoSuchBucket', 'The specified bucket does not exist'],
    400: ['InvalidRequest', 'Invalid Request'],
  };

  function validateFault(f) {
    const kinds = ['status', 'malformed', 'stall', 'truncate'];
    if (!f || typeof f !== 'object' || !kinds.includes(f.kind)) {
      throw new Error(`fault.kind must be one of ${kinds.join(', ')}`);
    }
    const count = f.count === undefined || f.count === null ? 1 : Number(f.count);
    if (!Number.isInteger(count) || count === 0 || count < -1) throw new Error('fault.count must be a positive integer or -1');
    const fault = { id: nextFaultId++, kind: f.kind, count, match: f.match ?? null, applied: 0 };
    if (fault.match !== null && typeof fault.match !== 'string') throw new Error('fault.match must be a string or null');
    if (f.kind === 'status') {
      const status = Number(f.status ?? 500);
      if (!Number.isInteger(status) || status < 300 || status > 599) throw new Error('fault.status must be an HTTP error status');
      const [code, message] = FAULT_DEFAULTS[status] || ['InternalError', 'Injected error'];
      Object.assign(fault, { status, code: f.code ?? code, message: f.message ?? message });
    } else if (f.kind === 'stall') {
      const seconds = Number(f.seconds ?? 30);
      if (!(seconds >= 0)) throw new Error('fault.seconds must be >= 0');
      fault.seconds = seconds;
    } else if (f.kind === 'malformed') {
      fault.body = typeof f.body === 'string' ? f.body
        : '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>broken</Name><IsTruncated>false</IsTruncated><Contents><Key>half-an-element</Ke';
    } else if (f.kind === 'truncate') {
      if (f.bytes !== undefined && f.bytes !== null) {
        const bytes = Number(f.bytes);
        if (!Number.isInteger(bytes) || bytes < 0) throw new Error('fault.bytes must be a non-negative integer');
        fault.bytes = bytes;
      }
    }
    return fault;
  }

  function takeFault(target) {
    for (const f of faults) {
      if (f.count === 0) continue;
      if (f.match !== null && !target.includes(f.match)) continue;
      if (f.count > 0) f.count -= 1;
      f.applied += 1;
      faults = faults.filter((x) => x.count !== 0);
      return { ...f };
    }
    return null;
  }

  // ---- the S3 side ----------------------------------------------------------
  async function handleS3(req, res) {
    const started = Date.now();
    const url = req.url;
    const qi = url.indexOf('?');
    const rawPath = qi < 0 ? url : url.slice(0, qi);
    const rawQuery = qi < 0 ? '' : url.slice(qi + 1);
    const host = req.headers.host || '';
    const { style, bucket } = addressing(host);
    const entry = {
      seq: ++seq,
      time: new Date(started).toISOString(),
      method: req.method,
      path: rawPath,
      query: rawQuery,
      host,
      style,
      bucket: bucket ?? (rawPath.split('/')[1] || null),
      signature_ok: false,
      error: null,
      status: null,
      fault: null,
      client_closed: false,
    };
    let clientGone = false;
    res.on('close', () => {
      if (!res.writableFinished) {
        clientGone = true;
        entry.client_closed = true;
      }
    });
    let logged = false;
    const finish = (status) => {
      if (logged) return;
      logged = true;
      entry.status = status;
      entry.ms = Date.now() - started;
      logRequest(entry);
    };
    const resource = style === 'virtual' ? `/${bucket}${rawPath}` : rawPath;

    let body;
    try {
      body = await readBody(req);
    } catch (e) {
      if (e.tooLarge) {
        entry.error = 'EntityTooLarge';
        sendError(res, 400, 'EntityTooLarge', 'Your proposed upload exceeds the maximum allowed size.', resource);
        finish(400);
      } else {
        entry.error = 'ClientError';
        finish(0);
      }
      return;
    }
    const v = await verifyRequest(
      { method: req.method, rawPath, rawQuery, rawHeaders: req.rawHeaders, body },
      { credentials, region, sessionToken: args['session-token'], maxSkewMs },
    );
    entry.signature_ok = v.ok;
    if (!v.ok) {
      entry.error = v.code;
      entry.message = v.message;
      if (v.canonicalRequest) {
        entry.canonical_request = v.canonicalRequest;
        entry.string_to_sign = v.stringToSign;
      }
      if (req.headers.authorization) entry.authorization = req.headers.authorization;
      sendError(res, v.status, v.code, v.message, resource, v.extra);
      finish(v.status);
      return;
    }
    entry.signed_headers = v.signedHeaders.join(';');

    const fault = takeFault(rawPath + (rawQuery ? `?${rawQuery}` : ''));
    if (fault) entry.fault = fault.kind;
    if (fault && fault.kind === 'status') {
      entry.error = fault.code;
      sendError(res, fault.status, fault.code, fault.message, resource);
      finish(fault.status);
      return;
    }
    if (fault && fault.kind === 'malformed') {
      const b = Buffer.from(fault.body);
      res.writeHead(200, { 'Content-Type': 'application/xml', 'Content-Length': b.length, 'x-amz-request-id': requestId() });
      res.end(b);
      finish(200);
      return;
    }
    if (fault && fault.kind === 'stall') {
      const gone = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), fault.seconds * 1000);
        res.on('close', () => {
          if (clientGone) {
            clearTimeout(timer);
            resolve(true);
          }
        });
      });
      if (gone || clientGone) {
        entry.error = 'ClientClosed';
        finish(0);
        return;
      }
    }

    // Forward to s3rver (path style there).
    const headers = {};
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const n = req.rawHeaders[i].toLowerCase();
      if (HOP.has(n) || n === 'x-amz-date') continue;
      headers[n] = headers[n] !== undefined ? `${headers[n]},${req.rawHeaders[i + 1]}` : req.rawHeaders[i + 1];
    }
    const upstreamPath = style === 'virtual' ? (rawPath === '/' ? `/${bucket}` : `/${bucket}${rawPath}`) : rawPath;
    let ureq;
    try {
      ureq = await upstreamRequest({ method: req.method, rawPath: upstreamPath, rawQuery, headers, body });
    } catch (e) {
      entry.error = 'InternalError';
      sendError(res, 500, 'InternalError', `proxy: ${e.message}`, resource);
      finish(500);
      return;
    }
    let upstreamStatus = 0;
    res.on('close', () => {
      if (clientGone) {
        ureq.destroy();
        finish(upstreamStatus);
      }
    });
    ureq.on('error', (e) => {
      if (clientGone) {
        finish(0);
        return;
      }
      entry.error = 'InternalError';
      if (!res.headersSent) sendError(res, 500, 'InternalError', `proxy: upstream failed: ${e.message}`, resource);
      else res.destroy();
      finish(500);
    });
    ureq.on('response', (ures) => {
      upstreamStatus = ures.statusCode;
      const out = {};
      for (let i = 0; i < ures.rawHeaders.length; i += 2) {
        const n = ures.rawHeaders[i];
        const ln = n.toLowerCase();
        if (['connection', 'keep-alive', 'transfer-encoding'].includes(ln)) continue;
        out[n] = out[n] !== undefined ? [].concat(out[n], ures.rawHeaders[i + 1]) : ures.rawHeaders[i + 1];
      }
      if (ures.statusCode >= 400) entry.error = 'upstream';
      if (fault && fault.kind === 'truncate') {
        const chunks = [];
        ures.on('data', (c) => chunks.push(c));
        ures.on('end', () => {
          const full = Buffer.concat(chunks);
          const keep = Math.min(fault.bytes ?? Math.floor(full.length / 2), Math.max(full.length - 1, 0));
          for (const k of Object.keys(out)) if (k.toLowerCase() === 'content-length') delete out[k];
          out['Content-Length'] = String(Math.max(full.length, keep + 1));
          res.writeHead(ures.statusCode, out);
          res.write(full.subarray(0, keep), () => {
            // Let the partial body reach the client, then cut the connection.
            setTimeout(() => res.socket?.destroy(), 20);
          });
          entry.truncated_at = keep;
          finish(ures.statusCode);
        });
        return;
      }
      res.writeHead(ures.statusCode, out);
      ures.pipe(res);
      const errChunks = [];
      if (ures.statusCode >= 400) ures.on('data', (c) => errChunks.push(c));
      ures.on('end', () => {
        // Keep s3rver's own error code in the log.
        if (ures.statusCode >= 400) entry.error = xmlField(Buffer.concat(errChunks).toString('utf8'), 'Code') || 'upstream';
        finish(ures.statusCode);
      });
    });
    ureq.end(body.length ? body : undefined);
  }

  // ---- the control API --------------------------------------------------------
  async function handleControl(req, res) {
    const u = new URL(req.url, 'http://control');
    const q = u.searchParams;
    const route = `${req.method} ${u.pathname}`;
    const need = (name) => {
      const v = q.get(name);
      if (v === null || v === '') throw Object.assign(new Error(`query parameter "${name}" is required`), { status: 400 });
      return v;
    };
    const upstreamError = (r) => {
      const text = r.body.toString('utf8');
      return Object.assign(new Error(`s3rver: ${r.status} ${xmlField(text, 'Code') || ''} ${xmlField(text, 'Message') || text}`.trim()),
        { status: r.status >= 400 && r.status < 500 ? r.status : 502 });
    };
    const body = await readBody(req);
    const json = () => {
      if (!body.length) return {};
      try {
        return JSON.parse(body.toString('utf8'));
      } catch (e) {
        throw Object.assign(new Error(`invalid JSON body: ${e.message}`), { status: 400 });
      }
    };
    const putObject = async (bucket, key, data, contentType) => {
      const headers = contentType ? { 'content-type': contentType } : {};
      const r = await upstreamCall('PUT', objectPath(bucket, key), data, headers);
      if (r.status !== 200) throw upstreamError(r);
      return { bucket, key, size: data.length, etag: r.headers.etag };
    };
    switch (route) {
      case 'GET /__control/health':
        return sendJson(res, 200, {
          ok: true, port: server.address().port, s3rver_port: upstreamPort, region,
          access_key: args['access-key'], dir, log: logPath,
        });
      case 'POST /__control/bucket': {
        const name = need('name');
        const r = await upstreamCall('PUT', `/${name}`);
        if (r.status === 200) return sendJson(res, 200, { bucket: name, created: true });
        const code = xmlField(r.body.toString('utf8'), 'Code');
        if (r.status === 409 && /BucketAlready/.test(code || '')) return sendJson(res, 200, { bucket: name, created: false });
        throw upstreamError(r);
      }
      case 'DELETE /__control/bucket': {
        // Removes the bucket and everything in it (s3rver's own DELETE
        // refuses non-empty buckets).
        const name = need('name');
        if (!/^[a-z0-9][a-z0-9.-]*$/.test(name)) throw Object.assign(new Error('invalid bucket name'), { status: 400 });
        await fsp.rm(path.join(dir, name), { recursive: true, force: true, maxRetries: 5 });
        return sendJson(res, 200, { bucket: name, deleted: true });
      }
      case 'PUT /__control/object':
        return sendJson(res, 200, await putObject(need('bucket'), need('key'), body, q.get('content_type')));
      case 'DELETE /__control/object': {
        const bucket = need('bucket');
        const key = need('key');
        const r = await upstreamCall('DELETE', objectPath(bucket, key));
        if (r.status !== 204 && r.status !== 200) throw upstreamError(r);
        return sendJson(res, 200, { bucket, key, deleted: true });
      }
      case 'POST /__control/objects': {
        // {"objects": [{"key": k, "data": "text"} | {"key": k, "base64": "..."} | {"key": k, "size": n}]}
        const bucket = need('bucket');
        const spec = json();
        if (!Array.isArray(spec.objects)) throw Object.assign(new Error('body must be {"objects": [...]}'), { status: 400 });
        const items = spec.objects.map((o) => {
          if (!o || typeof o.key !== 'string' || o.key === '') throw Object.assign(new Error('every object needs a "key"'), { status: 400 });
          let data;
          if (typeof o.data === 'string') data = Buffer.from(o.data, 'utf8');
          else if (typeof o.base64 === 'string') data = Buffer.from(o.base64, 'base64');
          else data = Buffer.alloc(Number(o.size ?? 0), 'x');
          return { key: o.key, data };
        });
        const results = new Array(items.length);
        let next = 0;
        let failure = null;
        // On the first failure the others stop taking objects, and the answer
        // waits for the puts in flight: none lands after it.
        const worker = async () => {
          while (next < items.length && failure === null) {
            const i = next++;
            try {
              results[i] = await putObject(bucket, items[i].key, items[i].data);
            } catch (e) {
              failure = failure ?? e;
            }
          }
        };
        await Promise.all(Array.from({ length: Math.min(16, items.length) }, worker));
        if (failure !== null) throw failure;
        return sendJson(res, 200, { bucket, count: results.length, objects: results });
      }
      case 'POST /__control/fault': {
        let fault;
        try {
          fault = validateFault(json());
        } catch (e) {
          throw Object.assign(e, { status: e.status ?? 400 });
        }
        faults.push(fault);
        return sendJson(res, 200, fault);
      }
      case 'GET /__control/faults':
        return sendJson(res, 200, faults);
      case 'POST /__control/clear': {
        const what = q.get('what') || 'all';
        if (what === 'all' || what === 'faults') faults = [];
        if (what === 'all' || what === 'requests') requests = [];
        return sendJson(res, 200, { cleared: what });
      }
      case 'GET /__control/requests':
        return sendJson(res, 200, requests);
      default:
        return sendJson(res, 404, { error: `unknown control route ${route}` });
    }
  }

  const server = http.createServer((req, res) => {
    const { style } = addressing(req.headers.host);
    const isControl = style === 'path' && req.url.startsWith('/__control/');
    const h = isControl ? handleControl : handleS3;
    h(req, res).catch((e) => {
      if (isControl) {
        if (!res.headersSent) sendJson(res, e.status || 500, { error: e.message });
        else res.destroy();
      } else {
        process.stderr.write(`s3-server: ${e.stack || e}\n`);
        if (!res.headersSent) sendError(res, 500, 'InternalError', `proxy: ${e.message}`, req.url);
        else res.destroy();
      }
    });
  });
  server.on('clientError', (err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.keepAliveTimeout = 5000;

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(args.port), '127.0.0.1', resolve);
  });
  const port = server.address().port;

  let stopping = false;
  async function shutdown(code = 0) {
    if (stopping) return;
    stopping = true;
    server.close();
    for (const s of sockets) s.destroy();
    agent.destroy();
    try {
      await s3rver.close();
    } catch {
      // already closed
    }
    fs.closeSync(logFd);
    process.exit(code);
  }
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => shutdown(0));
  // When re-executed by a parent that goes away, go too.
  if (process.send) process.on('disconnect', () => shutdown(0));
  // --parent-pid: a test harness that dies without stopping us leaves no server behind.
  if (args['parent-pid']) {
    const ppid = Number(args['parent-pid']);
    setInterval(() => {
      try {
        process.kill(ppid, 0);
      } catch (e) {
        if (e.code === 'ESRCH') shutdown(0);
      }
    }, 1000).unref();
  }

  process.stdout.write(`s3-server listening on 127.0.0.1:${port}\n`);
}
