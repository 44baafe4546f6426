// Helper of test_sim_tls.py (not a node --test file): one tedious connection with the TLS options of the
// JSON argument, runs a query, prints {ok, rows} or {ok: false, code, message} as JSON on stdout.
//   node tedious_tls.mjs '{"port": 14330, "encrypt": true, "ca": "/path/ca.crt", "trust": false,
//                          "server": "127.0.0.1", "serverName": "localhost", "sql": "SELECT 1"}'
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', 'package.json'));
const { Connection, Request } = require('tedious');

const a = JSON.parse(process.argv[2]);
const options = {
  port: a.port,
  database: a.database ?? 'demo',
  encrypt: a.encrypt,
  trustServerCertificate: a.trust ?? false,
  connectTimeout: 10000,
  requestTimeout: 10000,
};
if (a.ca) options.cryptoCredentialsDetails = { ca: fs.readFileSync(a.ca) };
if (a.serverName) options.serverName = a.serverName;

let done = false;
function finish(result) {
  if (done) return;
  done = true;
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}

const c = new Connection({
  server: a.server ?? '127.0.0.1',
  authentication: { type: 'default', options: { userName: a.user ?? 'sa', password: a.password ?? 'Passw0rd!' } },
  options,
});
c.on('error', (err) => finish({ ok: false, code: err.code ?? 'ERROR', message: err.message }));
c.on('end', () => finish({ ok: false, code: 'END', message: 'connection ended' }));
c.on('connect', (err) => {
  if (err) finish({ ok: false, code: err.code, message: err.message, cause: err.cause?.code ?? err.cause?.message });
  const rows = [];
  const r = new Request(a.sql ?? 'SELECT 1 AS one', (e) => {
    c.close();
    finish(e ? { ok: false, code: e.code, message: e.message } : { ok: true, rows });
  });
  r.on('row', (cols) => rows.push(cols.map((x) => x.value)));
  c.execSql(r);
});
c.connect();
setTimeout(() => finish({ ok: false, code: 'TIMEOUT', message: 'no answer in 20 s' }), 20000);
