// tedious (Node's TDS client) against the SQL Server CDC simulator: login, typed values,
// sp_executesql parameters (and OUTPUT ones), prepare/execute/unprepare, RPC by name, SQL Server-shaped errors,
// cancel/timeout, wrong password.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const testDir = path.resolve(here, '..', '..');
const require = createRequire(path.join(testDir, 'package.json'));
const { Connection, Request, TYPES } = require('tedious');

let sim;
let port;

before(async () => {
  sim = spawn('/usr/bin/python3', [path.join(testDir, 'mssql-sim'), '--port', '0', '--clock', 'sim',
    '--start-time', '2026-03-01T00:00:00Z', '--dummy-interval', '0', '--cleanup-time', ''],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  port = await new Promise((resolve, reject) => {
    let out = '';
    sim.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/mssql-sim listening on 127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    sim.on('exit', (code) => reject(new Error(`simulator exited with ${code}`)));
  });
  const c = await connect();
  await run(c, "EXEC sim.commit @inserts = 3; EXEC sim.commit @updates = 1; EXEC sim.advance @seconds = 5; " +
    "EXEC sim.create_login @login = N'reader', @password = N'pw'", { batch: true });
  c.close();
});

after(() => { sim.kill('SIGTERM'); });

function connect({ user = 'sa', password = 'Passw0rd!', requestTimeout = 15000, tdsVersion = '7_4' } = {}) {
  return new Promise((resolve, reject) => {
    const c = new Connection({
      server: '127.0.0.1',
      authentication: { type: 'default', options: { userName: user, password } },
      options: { port, encrypt: false, database: 'demo', requestTimeout, cancelTimeout: 30000, tdsVersion },
    });
    c.on('connect', (err) => (err ? reject(err) : resolve(c)));
    c.on('error', () => {});
    c.connect();
  });
}

// Runs a request; resolves { err, sets: [{ columns, rows }], returnStatus }.
function run(c, sql, { params = [], batch = false, proc = false, onRequest } = {}) {
  return new Promise((resolve) => {
    const sets = [];
    let returnStatus;
    const r = new Request(sql, (err) => resolve({ err, sets, returnStatus }));
    for (const [name, type, value] of params) r.addParameter(name, type, value);
    r.on('columnMetadata', (cols) => sets.push({ columns: cols.map((x) => [x.colName, x.type.name]), rows: [] }));
    r.on('row', (cols) => sets[sets.length - 1].rows.push(cols.map((x) => x.value)));
    r.on('doneProc', (rowCount, more, status) => { returnStatus = status; });
    if (onRequest) onRequest(r);
    if (proc) c.callProcedure(r); else if (batch) c.execSqlBatch(r); else c.execSql(r);
  });
}

test('typed values: LSN bytes, datetimes, bigint, nvarchar, NULL', async () => {
  const c = await connect();
  const { err, sets } = await run(c, `SELECT sys.fn_cdc_get_max_lsn() AS max_lsn,
      sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()) AS t, COUNT_BIG(*) AS n, N'Zürich ]' AS s,
      CAST(NULL AS int) AS z, SYSUTCDATETIME() AS u, SYSDATETIMEOFFSET() AS dto, GETDATE() AS g,
      DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) AS tz,
      CAST('2026-01-02 03:04:05.1234567' AS datetime2(7)) AS d2 FROM cdc.lsn_time_mapping`, { batch: true });
  assert.equal(err, undefined);
  assert.deepEqual(sets[0].columns, [['max_lsn', 'Binary'], ['t', 'DateTimeN'], ['n', 'BigInt'],
    ['s', 'NVarChar'], ['z', 'IntN'], ['u', 'DateTime2'], ['dto', 'DateTimeOffset'], ['g', 'DateTime'],
    ['tz', 'IntN'], ['d2', 'DateTime2']]);
  const [lsn, t, n, s, z, u, dto, g, tz, d2] = sets[0].rows[0];
  assert.equal(g.toISOString(), '2026-03-01T00:00:05.000Z');
  assert.equal(tz, 0);
  assert.ok(Buffer.isBuffer(lsn) && lsn.length === 10);
  assert.equal(t.toISOString(), '2026-03-01T00:00:00.000Z');
  assert.equal(n, '2');
  assert.equal(s, 'Zürich ]');
  assert.equal(z, null);
  assert.equal(u.toISOString(), '2026-03-01T00:00:05.000Z');
  assert.equal(dto.toISOString(), '2026-03-01T00:00:05.000Z');
  assert.equal(d2.toISOString(), '2026-01-02T03:04:05.123Z');
  assert.ok(Math.abs(d2.nanosecondsDelta - 0.0004567) < 1e-9);
  c.close();
});

test('sp_executesql with typed parameters (ProcID 10)', async () => {
  const c = await connect();
  const mx = (await run(c, 'SELECT sys.fn_cdc_get_max_lsn()')).sets[0].rows[0][0];
  const { err, sets } = await run(c, `SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) AS ins,
      COUNT_BIG(CASE WHEN c.[__$operation] = 4 THEN 1 END) AS upd, MAX(c.[__$start_lsn]) AS last_lsn, @tag AS tag
      FROM [cdc].[dbo_orders_CT] AS c WHERE c.[__$start_lsn] > @from AND c.[__$start_lsn] <= @to`, {
    params: [['from', TYPES.Binary, Buffer.alloc(10)], ['to', TYPES.Binary, mx], ['tag', TYPES.NVarChar, 'ü']],
  });
  assert.equal(err, undefined);
  assert.deepEqual(sets[0].rows[0].slice(0, 2), ['3', '1']);
  assert.deepEqual(sets[0].rows[0][2], mx);
  assert.equal(sets[0].rows[0][3], 'ü');
  const t = await run(c, "SELECT sys.fn_cdc_map_time_to_lsn(N'largest less than or equal', @t) AS l",
    { params: [['t', TYPES.DateTime2, new Date('2026-03-01T00:00:10Z')]] });
  assert.deepEqual(t.sets[0].rows[0][0], mx);
  c.close();
});

test('RPC by name with RETURNSTATUS', async () => {
  const c = await connect();
  const { err, sets, returnStatus } = await run(c, 'sys.sp_cdc_help_change_data_capture', {
    proc: true, params: [['source_schema', TYPES.NVarChar, 'dbo'], ['source_name', TYPES.NVarChar, 'orders']],
  });
  assert.equal(err, undefined);
  assert.equal(returnStatus, 0);
  assert.equal(sets[0].columns.length, 15);
  assert.equal(sets[0].rows[0][2], 'dbo_orders');
  assert.equal(sets[0].rows[0][14], '[order_id], [customer], [amount], [status], [created_at]');
  c.close();
});

test('sp_executesql OUTPUT parameters come back as RETURNVALUE tokens', async () => {
  const c = await connect();
  const values = {};
  const { err } = await run(c, 'SET @n = @a * 2; SET @s = N\'x\' + @t; EXEC @rc = sys.sp_cdc_help_jobs', {
    onRequest: (r) => {
      r.addParameter('a', TYPES.Int, 21);
      r.addParameter('t', TYPES.NVarChar, 'yz');
      r.addOutputParameter('n', TYPES.Int);
      r.addOutputParameter('s', TYPES.NVarChar, null, { length: 10 });
      r.addOutputParameter('rc', TYPES.Int);
      r.on('returnValue', (name, value) => { values[name] = value; });
    },
  });
  assert.equal(err, undefined);
  assert.deepEqual(values, { n: 42, s: 'xyz', rc: 0 });
  c.close();
});

test('prepare / execute / unprepare (sp_prepare, sp_execute, sp_unprepare by ProcID)', async () => {
  const c = await connect();
  const r = new Request('SELECT @a + 1 AS v, @b AS b', () => {});
  r.addParameter('a', TYPES.Int);
  r.addParameter('b', TYPES.NVarChar);
  await new Promise((resolve, reject) => {
    r.on('prepared', resolve);
    r.on('error', reject);
    c.prepare(r);
  });
  assert.ok(r.handle > 0);
  for (const [a, b] of [[1, 'x'], [41, 'y']]) {
    const rows = [];
    await new Promise((resolve, reject) => {
      // tedious calls the prepared Request's callback after each execution
      Object.assign(r, { callback: (err) => (err ? reject(err) : resolve()) });
      r.removeAllListeners('row');
      r.on('row', (cols) => rows.push(cols.map((x) => x.value)));
      c.execute(r, { a, b });
    });
    assert.deepEqual(rows, [[a + 1, b]]);
  }
  const handle = r.handle;
  await new Promise((resolve, reject) => {
    Object.assign(r, { callback: (err) => (err ? reject(err) : resolve()) });
    c.unprepare(r);
  });
  const again = await run(c, `EXEC sp_execute ${handle}`, { batch: true });
  assert.equal(again.err.number, 8179);
  c.close();
});

test('SQL Server-shaped errors', async () => {
  const c = await connect();
  let r = await run(c, 'SELECT * FROM cdc.nope', { batch: true });
  assert.equal(r.err.number, 208);
  assert.equal(r.err.message, "Invalid object name 'cdc.nope'.");
  r = await run(c, 'SELECT FROM WHERE', { batch: true });
  assert.equal(r.err.number, 102);
  assert.equal(r.err.class, 15);
  r = await run(c, "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(0x00, 0x00, N'all')");
  assert.equal(r.err.number, 313);
  c.close();
  const reader = await connect({ user: 'reader', password: 'pw' });
  r = await run(reader, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders') AS m", { batch: true });
  assert.deepEqual(r.sets[0].rows[0][0], Buffer.alloc(10));
  r = await run(reader, 'SELECT COUNT(*) FROM [cdc].[dbo_orders_CT]', { batch: true });
  assert.equal(r.err.number, 229);
  reader.close();
});

test('RPC sp_executesql: 208 aborts the body, 245 the batch; the connection stays usable', async () => {
  const c = await connect();
  let r = await run(c, 'SELECT 1 AS a; SELECT * FROM dbo.nope; SELECT 2 AS a',
    { params: [['p', TYPES.Int, 1]] });
  assert.equal(r.err.number, 208);
  assert.deepEqual(r.sets.map((s) => s.rows), [[[1]]]);
  r = await run(c, "SELECT 1 AS a; SELECT CONVERT(int, N'abc') AS b; SELECT 2 AS a",
    { params: [['p', TYPES.Int, 1]] });
  assert.equal(r.err.number, 245);
  assert.deepEqual(r.sets.map((s) => s.rows), [[[1]]]);
  r = await run(c, 'SELECT 42 AS x', { params: [['p', TYPES.Int, 1]] });
  assert.equal(r.err, undefined);
  assert.deepEqual(r.sets[0].rows, [[42]]);
  c.close();
});

test('request timeout sends ATTENTION and the connection stays usable', async () => {
  const c = await connect({ requestTimeout: 500 });
  const t0 = Date.now();
  const r = await run(c, "WAITFOR DELAY '00:01:00'", { batch: true });
  assert.equal(r.err.code, 'ETIMEOUT');
  assert.ok(Date.now() - t0 < 20000);
  const ok = await run(c, 'SELECT 42 AS x', { batch: true });
  assert.deepEqual(ok.sets[0].rows, [[42]]);
  c.close();
});

test('cancel stops a streaming result', async () => {
  const c = await connect();
  let rows = 0;
  const r = await run(c, 'EXEC sim.stream_constant @rows = 2000000', {
    batch: true,
    onRequest: (req) => req.on('row', () => { rows += 1; if (rows === 1000) c.cancel(); }),
  });
  assert.equal(r.err.code, 'ECANCEL');
  assert.ok(rows < 2000000);
  const ok = await run(c, 'SELECT 1 AS x', { batch: true });
  assert.deepEqual(ok.sets[0].rows, [[1]]);
  c.close();
});

test('wrong password is refused with 18456', async () => {
  await assert.rejects(connect({ password: 'wrong' }), (err) => {
    assert.equal(err.code, 'ELOGIN');
    assert.match(err.message, /Login failed for user 'sa'/);
    return true;
  });
});

// Each TDS version tedious speaks: LOGINACK's version is taken, dates are strings below 7.3, (max) types
// are ntext/image in 7.1 (tedious sets TEXTSIZE 2147483647 at login), parameters work.
for (const [tdsVersion, dates] of [['7_1', false], ['7_2', false], ['7_3_A', true], ['7_3_B', true], ['7_4', true]]) {
  test(`TDS ${tdsVersion}: negotiated version and its encodings`, async () => {
    const c = await connect({ tdsVersion });
    const big = 'x'.repeat(10000);
    const { err, sets } = await run(c, `SELECT CAST('2026-11-02 09:00' AS datetime2(7)) AS d2,
        CAST(N'${big}' AS nvarchar(max)) AS big, CAST(0x0102 AS varbinary(max)) AS vb,
        CAST('2026-11-02 09:00:00.003' AS datetime) AS dt, CAST(0x0102 AS binary(10)) AS b,
        CAST(9000000000 AS bigint) AS bi, @p AS p`, { params: [['p', TYPES.NVarChar, 'ü']] });
    assert.equal(err, undefined);
    assert.equal(c.config.options.tdsVersion, tdsVersion);
    const [d2, bigv, vb, dt, b, bi, p] = sets[0].rows[0];
    if (dates) assert.equal(d2.toISOString(), '2026-11-02T09:00:00.000Z');
    else assert.equal(d2, '2026-11-02 09:00:00.0000000');
    assert.equal(sets[0].columns[1][1], tdsVersion === '7_1' ? 'NText' : 'NVarChar');
    assert.equal(bigv, big);
    assert.deepEqual(vb, Buffer.from([1, 2]));
    assert.equal(dt.toISOString(), '2026-11-02T09:00:00.003Z');
    assert.deepEqual(b, Buffer.from([1, 2, 0, 0, 0, 0, 0, 0, 0, 0]));
    assert.equal(bi, '9000000000');
    assert.equal(p, 'ü');
    c.close();
  });
}
