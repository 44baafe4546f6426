import com.microsoft.sqlserver.jdbc.ISQLServerPreparedStatement;
import com.microsoft.sqlserver.jdbc.SQLServerError;
import com.microsoft.sqlserver.jdbc.SQLServerException;

import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Microsoft's JDBC driver against the SQL Server simulator (run by test/peers/jdbc/run, once per driver
 * version): java JdbcPeerTest peer.properties DRIVER_VERSION.
 *
 * Every expectation is SQL Server's documented behaviour (error numbers, states and classes, result set
 * shapes of the catalog procedures, data type mappings), so a failure means the simulator and SQL Server
 * disagree, or the driver and the simulator do.  Where the test needs to know what went over the wire
 * (which RPC the driver chose), it reads the simulator's DEBUG log of its own session.
 */
public class JdbcPeerTest {
    static final Properties CFG = new Properties();
    static String driver;
    static int major;
    static int passed, failed;
    static String truststore;
    static final String PASSWORD = "Passw0rd!";

    interface Body {
        void run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        try (InputStream in = new FileInputStream(args[0])) {
            CFG.load(in);
        }
        driver = args[1];
        major = Integer.parseInt(driver.split("\\.")[0]);
        truststore = makeTruststore(CFG.getProperty("ca"), "ca");
        String tag = driver.replace('.', '_');

        try (Connection c = connect("plain", "")) {
            exec(c, "EXEC sim.commit @table = N'dbo.orders', @inserts = 3");
            exec(c, "EXEC sim.advance @seconds = 1");
            exec(c, "EXEC sim.commit @table = N'dbo.orders', @inserts = 2, @updates = 1");
            exec(c, "EXEC sim.capture");
            exec(c, "EXEC sim.create_login @login = N'jdbc_" + tag + "', @password = N'" + PASSWORD + "'");
        }

        loginAndTls(tag);
        kerberos(tag);
        featureExtensions(tag);
        preparedStatements(tag);
        statements();
        lsns();
        dateTimes();
        errors(tag);
        metadata();
        sessionSettings();
        transactions();

        System.out.println("# done [" + driver + "] " + passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    // --- login, TLS ------------------------------------------------------------------------------------

    static void loginAndTls(String tag) {
        test("login: SQL authentication in plaintext (encrypt=false, server without a certificate)", () -> {
            try (Connection c = connect("plain", "encrypt=false")) {
                eq("demo", c.getCatalog(), "catalog");
                eq("Microsoft SQL Server", c.getMetaData().getDatabaseProductName(), "product");
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                eq("", sessionEncryption(c, "plain"), "no TLS in the simulator's log");
            }
        });
        test("login: encrypt=true against a server without a certificate is refused by the driver", () -> {
            expectFailure(() -> connect("plain", "encrypt=true;trustServerCertificate=true"), null,
                    "SSL|TLS|encrypt", "driver refuses a server answering ENCRYPT_NOT_SUP");
        });
        test("login: login-only TLS (encrypt=false, server with a certificate: PRELOGIN OFF/OFF)", () -> {
            try (Connection c = connect("tls", "encrypt=false")) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                eq("login", sessionEncryption(c, "tls"), "TLS for the LOGIN7 packet only");
            }
        });
        test("login: full TLS trusting the test CA through a truststore (encrypt=true)", () -> {
            try (Connection c = connect("tls", "encrypt=true;trustStore=" + truststore
                    + ";trustStorePassword=changeit;trustStoreType=PKCS12;hostNameInCertificate=localhost")) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                eq("full", sessionEncryption(c, "tls"), "every packet in TLS");
            }
        });
        test("login: full TLS with trustServerCertificate=true", () -> {
            try (Connection c = connect("tls", "encrypt=true;trustServerCertificate=true")) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                eq("full", sessionEncryption(c, "tls"), "every packet in TLS");
            }
        });
        test("login: encrypt=true refuses a certificate of an untrusted CA", () -> {
            String other = makeTruststore(CFG.getProperty("wrong_ca"), "other");
            expectFailure(() -> connect("tls", "encrypt=true;trustStore=" + other
                    + ";trustStorePassword=changeit;trustStoreType=PKCS12;hostNameInCertificate=localhost"),
                    null, "PKIX|certificat|SSL|TLS", "certificate path not trusted");
        });
        test("login: encrypt=true refuses a certificate for another host name", () -> {
            expectFailure(() -> connect("tls", "encrypt=true;trustStore=" + truststore
                    + ";trustStorePassword=changeit;trustStoreType=PKCS12;hostNameInCertificate=db.example.invalid"),
                    null, "certificat|host|name|SSL|TLS", "host name not in the certificate");
        });
        test("login: Force Encryption answers ENCRYPT_REQ to encrypt=false and the whole session is in TLS", () -> {
            try (Connection c = connect("force", "encrypt=false;trustServerCertificate=true")) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                eq("full", sessionEncryption(c, "force"), "every packet in TLS");
            }
        });
        test("login: Force Encryption, encrypt=false validates the certificate (truststore)", () -> {
            try (Connection c = connect("force", "encrypt=false;trustStore=" + truststore
                    + ";trustStorePassword=changeit;trustStoreType=PKCS12;hostNameInCertificate=localhost")) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
            }
        });
        test("login: wrong password is Msg 18456, class 14, state 1, and the driver reports it", () -> {
            SQLServerException e = expectSqlError(() -> DriverManager.getConnection(url("plain", ""), "sa", "nope"),
                    18456, 1, 14);
            eq("Login failed for user 'sa'.", e.getSQLServerError().getErrorMessage(), "message");
        });
        test("login: a login of another simulator run, unknown here, is Msg 18456", () -> {
            expectSqlError(() -> DriverManager.getConnection(url("plain", ""), "nobody_" + tag, PASSWORD),
                    18456, 1, 14);
        });
        test("login: unknown database is Msg 4060, state 1, class 11", () -> {
            // connectRetryCount=0: the driver counts 4060 among the transient errors it retries after
            // connectRetryInterval (10 s); 12.4 also retries a login whose first error is not 18456 until
            // loginTimeout ends
            expectSqlError(() -> DriverManager.getConnection(url("plain", "connectRetryCount=0;loginTimeout=2").replace(
                    "databaseName=demo", "databaseName=nodb"), "sa", PASSWORD), 4060, 1, 11);
        });
        test("login: a login without a user in the database opens master by default", () -> {
            try (Connection c = connect("plain", "")) {
                exec(c, "CREATE LOGIN [jdbc_m_" + tag + "] WITH PASSWORD = N'" + PASSWORD + "'");
            }
            try (Connection c = DriverManager.getConnection(url("plain", "").replace("databaseName=demo;", ""),
                    "jdbc_m_" + tag, PASSWORD)) {
                eq("master", c.getCatalog(), "catalog");
            }
        });
        test("login: the driver's isValid() and network timeout work", () -> {
            try (Connection c = connect("plain", "")) {
                eq(true, c.isValid(5), "isValid");
                c.setNetworkTimeout(Runnable::run, 5000);
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
            }
        });
    }

    // --- LOGIN7 feature extensions ----------------------------------------------------------------

    static void featureExtensions(String tag) {
        test("LOGIN7: the simulator parses every feature extension the driver sends", () -> {
            try (Connection c = connect("plain", "")) {
                String features = loginFeatures(c, "plain");
                mustContain(features, "SESSIONRECOVERY", "connectRetryCount=1 (the default) asks for it");
                mustContain(features, "UTF8_SUPPORT", "UTF8_SUPPORT");
                mustContain(features, "DATACLASSIFICATION", "DATACLASSIFICATION");
                if (major >= 13) {
                    mustContain(features, "USERAGENT", "13.x sends USERAGENT");
                }
                mustContain(features, "ack UTF8_SUPPORT", "the simulator acknowledges UTF8_SUPPORT only");
            }
        });
        test("LOGIN7: no session recovery is acknowledged, so the driver does not reconnect silently", () -> {
            // a login of this driver's run only: the other driver's JVM uses the same simulator at the same time
            try (Connection c = DriverManager.getConnection(url("plain", "connectRetryCount=1"), "jdbc_" + tag,
                    PASSWORD)) {
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                try (Connection admin = connect("plain", "")) {
                    exec(admin, "EXEC sim.kill_sessions @login = N'jdbc_" + tag + "'");
                }
                SQLException e = expectFailure(() -> scalarInt(c, "SELECT 2"), null, ".",
                        "the killed session reports an error");
                eq(false, c.isValid(2), "connection is gone");
            }
        });
        test("LOGIN7: connectRetryCount=0 (no SESSIONRECOVERY) and columnEncryptionSetting=Disabled log in", () -> {
            try (Connection c = connect("plain", "connectRetryCount=0;columnEncryptionSetting=Disabled")) {
                String features = loginFeatures(c, "plain");
                if (features.contains("SESSIONRECOVERY")) {
                    throw new AssertionError("SESSIONRECOVERY sent although connectRetryCount=0: " + features);
                }
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
            }
        });
        test("LOGIN7: columnEncryptionSetting=Enabled: no COLUMNENCRYPTION ack (no Always Encrypted); the "
                + "driver still asks sp_describe_parameter_encryption, which is Msg 2812 here", () -> {
            try (Connection c = connect("plain", "columnEncryptionSetting=Enabled")) {
                eq(1, scalarInt(c, "SELECT 1"), "unparameterized statements run");
                try (PreparedStatement ps = c.prepareStatement("SELECT ? AS v")) {
                    ps.setInt(1, 5);
                    SQLServerException e = expectSqlError(() -> one(ps), 2812, 62, 16);
                    mustContain(e.getMessage(), "sp_describe_parameter_encryption", "the procedure");
                }
            }
        });
        test("LOGIN7: fODBC means TEXTSIZE infinite (no SET TEXTSIZE from the driver); packetSize=8000 is used",
                () -> {
            try (Connection c = connect("plain", "packetSize=8000")) {
                String big = scalarString(c,
                        "SELECT CAST(REPLICATE(N'x', 3000) AS nvarchar(max)) + REPLICATE(N'y', 3000)");
                eq(6000, big == null ? -1 : big.length(), "6000 characters over 8000-byte packets");
            }
        });
    }

    // --- prepared statements over RPC ------------------------------------------------------------------

    static void preparedStatements(String tag) {
        test("prepared: prepareMethod=prepexec (default) runs sp_executesql, then sp_prepexec, then sp_execute",
                () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                int h;
                try (PreparedStatement ps = c.prepareStatement("SELECT CAST(? AS int) * 2 AS v, ? AS s")) {
                    for (int i = 1; i <= 3; i++) {
                        ps.setInt(1, i);
                        ps.setString(2, "x" + i);
                        try (ResultSet rs = ps.executeQuery()) {
                            eq(true, rs.next(), "row");
                            eq(2 * i, rs.getInt(1), "v");
                            eq("x" + i, rs.getString(2), "s");
                            eq(false, rs.next(), "one row");
                        }
                    }
                    h = ((ISQLServerPreparedStatement) ps).getPreparedStatementHandle();
                }
                eq(List.of("sp_executesql", "sp_prepexec", "sp_execute"), w.rpcs(), "RPCs");
                if (h <= 0) {
                    throw new AssertionError("no prepared handle returned (RETURNVALUE): " + h);
                }
            }
        });
        test("prepared: prepareMethod=prepare runs sp_prepare (metadata only), then sp_execute", () -> {
            try (Connection c = connect("plain", "prepareMethod=prepare")) {
                Wire w = new Wire(c, "plain");
                try (PreparedStatement ps = c.prepareStatement("SELECT CAST(? AS bigint) + 1 AS v")) {
                    for (long i = 1; i <= 3; i++) {
                        ps.setLong(1, i * 10000000000L);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            eq(i * 10000000000L + 1, rs.getLong(1), "v");
                        }
                    }
                }
                eq(List.of("sp_executesql", "sp_prepare", "sp_execute", "sp_execute"), w.rpcs(), "RPCs");
            }
        });
        test("prepared: enablePrepareOnFirstPreparedStatementCall=true runs sp_prepexec at once", () -> {
            try (Connection c = connect("plain", "enablePrepareOnFirstPreparedStatementCall=true")) {
                Wire w = new Wire(c, "plain");
                try (PreparedStatement ps = c.prepareStatement("SELECT ? AS v")) {
                    for (int i = 0; i < 2; i++) {
                        ps.setString(1, "abc" + i);
                        eq("abc" + i, one(ps), "v");
                    }
                }
                eq(List.of("sp_prepexec", "sp_execute"), w.rpcs(), "RPCs");
            }
        });
        if (major >= 13) {
            test("prepared: prepareMethod=none sends the statement as a batch with literal values", () -> {
                try (Connection c = connect("plain", "prepareMethod=none")) {
                    Wire w = new Wire(c, "plain");
                    try (PreparedStatement ps = c.prepareStatement("SELECT ? AS v, ? AS n")) {
                        ps.setString(1, "it's");
                        ps.setInt(2, 7);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            eq("it's", rs.getString(1), "v");
                            eq(7, rs.getInt(2), "n");
                        }
                    }
                    eq(List.of(), w.rpcs(), "no RPC");
                    eq(1, w.batches().size(), "one batch");
                }
            });
        }
        test("prepared: sp_unprepare (serverPreparedStatementDiscardThreshold=1: one RPC per close); "
                + "the handle is gone afterwards (Msg 8179)", () -> {
            try (Connection c = connect("plain", "serverPreparedStatementDiscardThreshold=1")) {
                Wire w = new Wire(c, "plain");
                try (PreparedStatement ps = c.prepareStatement("SELECT ? + 1 AS v")) {
                    for (int i = 0; i < 2; i++) {
                        ps.setInt(1, i);
                        eq(i + 1, Integer.valueOf(one(ps)), "v");
                    }
                }
                eq(List.of("sp_executesql", "sp_prepexec", "sp_unprepare"), w.rpcs(), "RPCs");
                Matcher m = Pattern.compile("rpc sp_unprepare \\[\\('', (\\d+),").matcher(w.text());
                if (!m.find() || Integer.parseInt(m.group(1)) <= 0) {
                    throw new AssertionError("sp_unprepare of the handle sp_prepexec returned: " + w.text());
                }
                int h = Integer.parseInt(m.group(1));
                expectSqlError(() -> exec(c, "EXEC sp_execute " + h), 8179, 2, 16);
                expectSqlError(() -> exec(c, "EXEC sp_unprepare " + h), 8179, 2, 16);
            }
        });
        test("prepared: batched sp_unprepare (default threshold 10: 'EXEC sp_unprepare n;' batch)", () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                for (int k = 0; k < 12; k++) {
                    try (PreparedStatement ps = c.prepareStatement("SELECT ? AS v, " + k + " AS k")) {
                        for (int i = 0; i < 2; i++) {
                            ps.setInt(1, i);
                            one(ps);
                        }
                    }
                }
                String unprepare = null;
                for (String b : w.batches()) {
                    if (b.contains("sp_unprepare")) {
                        unprepare = b;
                    }
                }
                if (unprepare == null) {
                    throw new AssertionError("no batch of sp_unprepare: " + w.batches());
                }
                Matcher m = Pattern.compile("EXEC sp_unprepare (\\d+);").matcher(unprepare);
                List<Integer> handles = new ArrayList<>();
                while (m.find()) {
                    handles.add(Integer.parseInt(m.group(1)));
                }
                if (handles.size() < 10 || handles.contains(0)) {
                    throw new AssertionError("handles the driver learnt from RETURNVALUE: " + handles);
                }
                mustNotContain(w.text(), "Msg ", "no error from the unprepare batch");
                expectSqlError(() -> exec(c, "EXEC sp_execute " + handles.get(0)), 8179, 2, 16);
            }
        });
        test("prepared: statement pooling reuses the handle of a closed statement (sp_execute only)", () -> {
            try (Connection c = connect("plain", "disableStatementPooling=false;statementPoolingCacheSize=10")) {
                Wire w = new Wire(c, "plain");
                for (int k = 0; k < 3; k++) {
                    try (PreparedStatement ps = c.prepareStatement("SELECT ? * 3 AS v")) {
                        ps.setInt(1, k);
                        eq(String.valueOf(3 * k), one(ps), "v");
                    }
                }
                eq(List.of("sp_executesql", "sp_prepexec", "sp_execute"), w.rpcs(), "RPCs");
            }
        });
        test("prepared: parameter types round-trip (int, bigint, bit, decimal, float, nvarchar, varchar, "
                + "varbinary, NULL)", () -> {
            try (Connection c = connect("plain", "")) {
                for (String props : new String[] {"", "sendStringParametersAsUnicode=false"}) {
                    try (Connection cc = connect("plain", props);
                         PreparedStatement ps = cc.prepareStatement(
                                 "SELECT ? AS i, ? AS b, ? AS t, ? AS d, ? AS f, ? AS s, ? AS x, ? AS n")) {
                        ps.setInt(1, -7);
                        ps.setLong(2, 1L << 40);
                        ps.setBoolean(3, true);
                        ps.setBigDecimal(4, new BigDecimal("12345.67"));
                        ps.setDouble(5, 0.25);
                        ps.setString(6, "Grüße ☃");
                        ps.setBytes(7, new byte[] {0, 1, (byte) 0xFE});
                        ps.setNull(8, Types.INTEGER);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            eq(-7, rs.getInt(1), "int");
                            eq(1L << 40, rs.getLong(2), "bigint");
                            eq(true, rs.getBoolean(3), "bit");
                            eq(new BigDecimal("12345.67"), rs.getBigDecimal(4), "decimal");
                            eq(0.25, rs.getDouble(5), "float");
                            eq(props.isEmpty() ? "Grüße ☃" : "Grüße ?", rs.getString(6), "string " + props);
                            eq("0001fe", hex(rs.getBytes(7)), "varbinary");
                            rs.getInt(8);
                            eq(true, rs.wasNull(), "NULL");
                        }
                    }
                }
            }
        });
        test("prepared: a CallableStatement {call sys.sp_cdc_help_jobs}", () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                try (CallableStatement cs = c.prepareCall("{call sys.sp_cdc_help_jobs}");
                     ResultSet rs = cs.executeQuery()) {
                    int n = 0;
                    while (rs.next()) {
                        n++;
                    }
                    eq(2, n, "capture and cleanup jobs");
                }
                mustContain(w.text(), "EXEC sys.sp_cdc_help_jobs", "the driver sends {call} as EXEC in sp_executesql");
            }
        });
        test("prepared: {? = call ...}: EXEC @P0 = proc in sp_executesql, the output parameter is a RETURNVALUE",
                () -> {
            try (Connection c = connect("plain", "");
                 CallableStatement cs = c.prepareCall("{? = call sys.sp_cdc_help_change_data_capture}")) {
                cs.registerOutParameter(1, Types.INTEGER);
                cs.execute();
                while (cs.getMoreResults() || cs.getUpdateCount() != -1) {
                    // drain
                }
                eq(0, cs.getInt(1), "return status");
            }
        });
    }

    // --- statements, results, attention ------------------------------------------------------------------

    static void statements() {
        test("statements: setQueryTimeout sends ATTENTION; the driver reports a timeout; the connection goes on",
                () -> {
            try (Connection c = connect("plain", "")) {
                try (Statement s = c.createStatement()) {
                    s.setQueryTimeout(1);
                    long t0 = System.nanoTime();
                    try {
                        s.execute("WAITFOR DELAY '00:00:20'");
                        throw new AssertionError("no timeout");
                    } catch (SQLException e) {
                        mustContain(e.getClass().getName() + " " + e.getMessage(), "imeout", "timeout");
                    }
                    if ((System.nanoTime() - t0) / 1e9 > 10) {
                        throw new AssertionError("the statement ran on after the attention");
                    }
                }
                eq(1, scalarInt(c, "SELECT 1"), "SELECT 1 after the attention");
            }
        });
        test("statements: a 50,000-row result streams over many packets (responseBuffering=adaptive)", () -> {
            try (Connection c = connect("plain", "responseBuffering=adaptive");
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("EXEC sim.stream_constant @rows = 50000")) {
                int n = 0;
                while (rs.next()) {
                    n++;
                }
                eq(50000, n, "rows");
            }
        });
        test("statements: setCatalog sends USE and follows the ENVCHANGE", () -> {
            try (Connection c = connect("plain", "")) {
                c.setCatalog("master");
                eq("master", c.getCatalog(), "driver");
                eq("master", scalarString(c, "SELECT DB_NAME()"), "server");
                c.setCatalog("demo");
                eq("demo", scalarString(c, "SELECT DB_NAME()"), "back");
            }
        });
        test("statements: several result sets and update counts of one batch", () -> {
            try (Connection c = connect("plain", "");
                 Statement s = c.createStatement()) {
                boolean rs = s.execute("SELECT 1 AS a; DECLARE @t TABLE(x int); INSERT INTO @t VALUES (1), (2); "
                        + "SELECT COUNT(*) FROM @t");
                List<String> seen = new ArrayList<>();
                while (true) {
                    if (rs) {
                        try (ResultSet r = s.getResultSet()) {
                            r.next();
                            seen.add("rs:" + r.getInt(1));
                        }
                    } else {
                        int uc = s.getUpdateCount();
                        if (uc == -1) {
                            break;
                        }
                        seen.add("uc:" + uc);
                    }
                    rs = s.getMoreResults();
                }
                eq(List.of("rs:1", "uc:2", "rs:2"), seen, "results");
            }
        });
    }

    // --- LSNs ----------------------------------------------------------------------------------------

    static void lsns() {
        test("LSN: sys.fn_cdc_get_max_lsn() is binary(10) and getBytes gives 10 bytes", () -> {
            try (Connection c = connect("plain", "");
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT sys.fn_cdc_get_max_lsn() AS max_lsn, "
                         + "sys.fn_cdc_get_min_lsn(N'dbo_orders') AS min_lsn")) {
                ResultSetMetaData md = rs.getMetaData();
                eq(Types.BINARY, md.getColumnType(1), "JDBC type");
                eq("binary", md.getColumnTypeName(1), "type name");
                eq(10, md.getPrecision(1), "precision");
                rs.next();
                byte[] max = rs.getBytes(1), min = rs.getBytes(2);
                eq(10, max.length, "max length");
                eq(10, min.length, "min length");
                if (compare(min, max) > 0) {
                    throw new AssertionError("min > max: " + hex(min) + " " + hex(max));
                }
            }
        });
        test("LSN: setBytes parameters into cdc.fn_cdc_get_all_changes_dbo_orders (prepared, 3 executions)", () -> {
            try (Connection c = connect("plain", "")) {
                byte[][] range = lsnRange(c);
                try (PreparedStatement ps = c.prepareStatement("SELECT __$start_lsn, __$seqval, __$operation, "
                        + "order_id FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all update old') "
                        + "ORDER BY __$start_lsn, __$seqval, __$operation")) {
                    for (int k = 0; k < 3; k++) {
                        ps.setBytes(1, range[0]);
                        ps.setBytes(2, range[1]);
                        int n = 0;
                        byte[] prev = null;
                        try (ResultSet rs = ps.executeQuery()) {
                            eq(Types.BINARY, rs.getMetaData().getColumnType(1), "__$start_lsn type");
                            while (rs.next()) {
                                byte[] lsn = rs.getBytes(1);
                                eq(10, lsn.length, "__$start_lsn length");
                                eq(10, rs.getBytes(2).length, "__$seqval length");
                                if (prev != null && compare(prev, lsn) > 0) {
                                    throw new AssertionError("not in LSN order");
                                }
                                prev = lsn;
                                n++;
                            }
                        }
                        if (n < 7) {
                            throw new AssertionError("expected at least 7 change rows, got " + n);
                        }
                    }
                }
            }
        });
        test("LSN: fn_cdc_increment_lsn / decrement_lsn / map_lsn_to_time with setBytes", () -> {
            try (Connection c = connect("plain", "")) {
                byte[] max = lsnRange(c)[1];
                try (PreparedStatement ps = c.prepareStatement("SELECT sys.fn_cdc_increment_lsn(?) AS inc, "
                        + "sys.fn_cdc_decrement_lsn(?) AS dec, sys.fn_cdc_map_lsn_to_time(?) AS t")) {
                    ps.setBytes(1, max);
                    ps.setBytes(2, max);
                    ps.setBytes(3, max);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        eq(1, compare(rs.getBytes(1), max), "increment is larger");
                        eq(-1, compare(rs.getBytes(2), max), "decrement is smaller");
                        eq("datetime", rs.getMetaData().getColumnTypeName(3), "map_lsn_to_time type");
                        if (rs.getTimestamp(3) == null) {
                            throw new AssertionError("no commit time for max LSN");
                        }
                    }
                }
            }
        });
        test("LSN: an nvarchar parameter (setString) for an LSN is Msg 257", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement("SELECT sys.fn_cdc_increment_lsn(?)")) {
                ps.setString(1, "0x0000002A000001000001");
                expectSqlError(() -> one(ps), 257, null, 16);
            }
        });
        test("LSN: fn_cdc_map_time_to_lsn with a setTimestamp parameter", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement(
                         "SELECT sys.fn_cdc_map_time_to_lsn(N'largest less than or equal', ?) AS l")) {
                ps.setTimestamp(1, Timestamp.valueOf("2100-01-01 00:00:00"));
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    eq(0, compare(rs.getBytes(1), lsnRange(c)[1]), "largest LSN up to 2100 is max LSN");
                }
            }
        });
    }

    // --- date and time ---------------------------------------------------------------------------------

    static void dateTimes() {
        test("datetime/datetime2/datetimeoffset/date columns: types and values", () -> {
            try (Connection c = connect("plain", "");
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT CAST('2026-11-02 09:00:00.123' AS datetime) AS a, "
                         + "CAST('2026-11-02 09:00:00.1234567' AS datetime2(7)) AS b, "
                         + "CAST('2026-11-02 09:00:00.1234567 +01:00' AS datetimeoffset(7)) AS c, "
                         + "CAST('2026-11-02' AS date) AS d, CAST('2026-11-02 09:00:00.5' AS datetime2(1)) AS e")) {
                ResultSetMetaData md = rs.getMetaData();
                eq(Types.TIMESTAMP, md.getColumnType(1), "datetime JDBC type");
                eq("datetime", md.getColumnTypeName(1), "datetime name");
                eq(Types.TIMESTAMP, md.getColumnType(2), "datetime2 JDBC type");
                eq("datetime2", md.getColumnTypeName(2), "datetime2 name");
                eq(7, md.getScale(2), "datetime2 scale");
                eq(-155, md.getColumnType(3), "datetimeoffset JDBC type (microsoft.sql.Types.DATETIMEOFFSET)");
                eq("datetimeoffset", md.getColumnTypeName(3), "datetimeoffset name");
                eq(Types.DATE, md.getColumnType(4), "date JDBC type");
                eq(1, md.getScale(5), "datetime2(1) scale");
                rs.next();
                eq(Timestamp.valueOf("2026-11-02 09:00:00.123"), rs.getTimestamp(1), "datetime");
                eq(LocalDateTime.of(2026, 11, 2, 9, 0, 0, 123456700), rs.getObject(2, LocalDateTime.class),
                        "datetime2");
                eq(OffsetDateTime.of(2026, 11, 2, 9, 0, 0, 123456700, ZoneOffset.ofHours(1)),
                        rs.getObject(3, OffsetDateTime.class), "datetimeoffset");
                eq("microsoft.sql.DateTimeOffset", rs.getObject(3).getClass().getName(), "getObject class");
                eq(LocalDate.of(2026, 11, 2), rs.getObject(4, LocalDate.class), "date");
                eq(Timestamp.valueOf("2026-11-02 09:00:00.5"), rs.getTimestamp(5), "datetime2(1)");
            }
        });
        test("datetime: the 1/300 s ticks round like SQL Server (.997, .998 -> .997, .999 -> next second)", () -> {
            try (Connection c = connect("plain", "");
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT CAST('2026-01-01 23:59:59.997' AS datetime), "
                         + "CAST('2026-01-01 23:59:59.998' AS datetime), CAST('2026-01-01 23:59:59.999' AS datetime), "
                         + "CAST('2026-01-01 10:00:00.001' AS datetime)")) {
                rs.next();
                eq(Timestamp.valueOf("2026-01-01 23:59:59.997"), rs.getTimestamp(1), ".997");
                eq(Timestamp.valueOf("2026-01-01 23:59:59.997"), rs.getTimestamp(2), ".998");
                eq(Timestamp.valueOf("2026-01-02 00:00:00"), rs.getTimestamp(3), ".999");
                eq(Timestamp.valueOf("2026-01-01 10:00:00.0"), rs.getTimestamp(4), ".001");
            }
        });
        test("datetime parameters: setTimestamp (datetime2), setObject(OffsetDateTime) (datetimeoffset), "
                + "LocalDate (date)", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement("SELECT ? AS t, ? AS o, ? AS d, "
                         + "DATEADD(hour, 1, ?) AS plus, DATEPART(TZOFFSET, ?) AS tz")) {
                Timestamp ts = Timestamp.valueOf("2026-11-02 09:00:00.1234567");
                OffsetDateTime odt = OffsetDateTime.of(2026, 3, 29, 1, 30, 0, 500000000,
                        ZoneOffset.ofHoursMinutes(5, 30));
                ps.setTimestamp(1, ts);
                ps.setObject(2, odt);
                ps.setObject(3, LocalDate.of(2026, 2, 28));
                ps.setTimestamp(4, ts);
                ps.setObject(5, odt);
                try (ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData md = rs.getMetaData();
                    eq("datetime2", md.getColumnTypeName(1), "setTimestamp is sent as datetime2");
                    eq("datetimeoffset", md.getColumnTypeName(2), "OffsetDateTime is sent as datetimeoffset");
                    eq("date", md.getColumnTypeName(3), "LocalDate is sent as date");
                    rs.next();
                    eq(ts, rs.getTimestamp(1), "datetime2 value");
                    eq(odt, rs.getObject(2, OffsetDateTime.class), "datetimeoffset value");
                    eq(LocalDate.of(2026, 2, 28), rs.getObject(3, LocalDate.class), "date value");
                    eq(Timestamp.valueOf("2026-11-02 10:00:00.1234567"), rs.getTimestamp(4), "DATEADD");
                    eq(330, rs.getInt(5), "TZOFFSET minutes");
                }
            }
        });
        test("datetime: a datetime column compared with a datetime2 parameter (cdc.lsn_time_mapping)", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement(
                         "SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE tran_end_time <= ? AND tran_id <> 0x00")) {
                ps.setTimestamp(1, Timestamp.valueOf("2100-01-01 00:00:00"));
                if (Integer.parseInt(one(ps)) < 2) {
                    throw new AssertionError("expected the committed transactions");
                }
                ps.setTimestamp(1, Timestamp.valueOf("2000-01-01 00:00:00"));
                eq("0", one(ps), "none before 2000");
            }
        });
        test("datetime: SYSDATETIMEOFFSET / SYSDATETIME / GETDATE types", () -> {
            try (Connection c = connect("plain", "");
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT SYSDATETIMEOFFSET(), SYSDATETIME(), GETDATE(), "
                         + "TODATETIMEOFFSET(SYSDATETIME(), DATEPART(TZOFFSET, SYSDATETIMEOFFSET()))")) {
                ResultSetMetaData md = rs.getMetaData();
                eq("datetimeoffset", md.getColumnTypeName(1), "SYSDATETIMEOFFSET");
                eq("datetime2", md.getColumnTypeName(2), "SYSDATETIME");
                eq("datetime", md.getColumnTypeName(3), "GETDATE");
                eq("datetimeoffset", md.getColumnTypeName(4), "TODATETIMEOFFSET");
                rs.next();
                eq(rs.getObject(1, OffsetDateTime.class).toInstant(), rs.getObject(4, OffsetDateTime.class).toInstant(),
                        "same instant");
            }
        });
    }

    // --- errors ----------------------------------------------------------------------------------------

    static void errors(String tag) {
        test("error 208: invalid object name (class 16, state 1)", () -> {
            try (Connection c = connect("plain", "")) {
                SQLServerException e = expectSqlError(() -> exec(c, "SELECT * FROM dbo.nope"), 208, 1, 16);
                eq("Invalid object name 'dbo.nope'.", e.getSQLServerError().getErrorMessage(), "message");
                eq("S0002", e.getSQLState(), "SQLState the driver derives");
            }
        });
        test("error 208 through a prepared statement (sp_executesql)", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement("SELECT * FROM cdc.nope_CT WHERE __$start_lsn > ?")) {
                ps.setBytes(1, new byte[10]);
                expectSqlError(() -> one(ps), 208, 1, 16);
            }
        });
        test("error 229: SELECT permission denied on the change table (class 14, state 5)", () -> {
            try (Connection c = DriverManager.getConnection(url("plain", ""), "jdbc_" + tag, PASSWORD)) {
                SQLServerException e = expectSqlError(() -> exec(c, "SELECT * FROM cdc.dbo_orders_CT"), 229, 5, 14);
                eq("The SELECT permission was denied on the object 'dbo_orders_CT', database 'demo', schema 'cdc'.",
                        e.getSQLServerError().getErrorMessage(), "message");
            }
        });
        test("error 313: fn_cdc_get_all_changes_ with an LSN outside the valid range (class 16, state 3)", () -> {
            try (Connection c = connect("plain", "");
                 PreparedStatement ps = c.prepareStatement(
                         "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all')")) {
                byte[][] range = lsnRange(c);
                ps.setBytes(1, new byte[10]);
                ps.setBytes(2, range[1]);
                SQLServerException e = expectSqlError(() -> one(ps), 313, 3, 16);
                mustContain(e.getMessage(), "An insufficient number of arguments were supplied for the procedure or "
                        + "function cdc.fn_cdc_get_all_changes_", "message");
            }
        });
        test("error 2812: unknown procedure (CallableStatement)", () -> {
            try (Connection c = connect("plain", "");
                 CallableStatement cs = c.prepareCall("{call dbo.no_such_proc}")) {
                expectSqlError(cs::execute, 2812, 62, 16);
            }
        });
        test("errors: the connection stays usable after each error", () -> {
            try (Connection c = connect("plain", "")) {
                for (int i = 0; i < 3; i++) {
                    expectSqlError(() -> exec(c, "SELECT * FROM dbo.nope"), 208, 1, 16);
                    eq(1, scalarInt(c, "SELECT 1"), "SELECT 1");
                }
            }
        });
    }

    // --- DatabaseMetaData -----------------------------------------------------------------------------

    static void metadata() {
        test("metadata: getTables (sp_tables) finds dbo.orders as TABLE", () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                DatabaseMetaData md = c.getMetaData();
                List<Map<String, Object>> rows = rows(md.getTables(null, "dbo", "orders", new String[] {"TABLE"}));
                eq(1, rows.size(), "rows: " + rows);
                Map<String, Object> r = rows.get(0);
                eq("demo", r.get("TABLE_CAT"), "TABLE_CAT");
                eq("dbo", r.get("TABLE_SCHEM"), "TABLE_SCHEM");
                eq("orders", r.get("TABLE_NAME"), "TABLE_NAME");
                eq("TABLE", r.get("TABLE_TYPE"), "TABLE_TYPE");
                eq(null, r.get("REMARKS"), "REMARKS");
                mustContain(w.text(), "EXEC sp_tables", "sp_tables");
                List<Map<String, Object>> all = rows(md.getTables("demo", null, "%", new String[] {"TABLE"}));
                boolean found = all.stream().anyMatch(x -> "orders".equals(x.get("TABLE_NAME")));
                eq(true, found, "pattern % lists orders");
                eq(0, rows(md.getTables(null, "dbo", "orders", new String[] {"VIEW"})).size(), "not a VIEW");
                eq(0, rows(md.getTables(null, "dbo", "ord[_]rs", null)).size(), "[_] is a literal underscore");
                eq(1, rows(md.getTables(null, "dbo", "ord_rs", null)).size(), "_ matches one character");
            }
        });
        test("metadata: getTables with another database as catalog is Msg 15250", () -> {
            try (Connection c = connect("plain", "");
                 CallableStatement cs = c.prepareCall("{call sp_tables(?, ?, ?, ?)}")) {
                cs.setString(1, "orders");
                cs.setString(2, "dbo");
                cs.setString(3, "master");
                cs.setNull(4, Types.VARCHAR);
                expectSqlError(cs::executeQuery, 15250, null, 16);
            }
        });
        test("metadata: getColumns (table variable + INSERT EXEC sp_columns_100, 13.x tries sp_columns_170 first)",
                () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                List<Map<String, Object>> rows = rows(c.getMetaData().getColumns(null, "dbo", "orders", null));
                eq(5, rows.size(), "5 columns: " + rows);
                String[] names = {"order_id", "customer", "amount", "status", "created_at"};
                for (int i = 0; i < 5; i++) {
                    eq(names[i], rows.get(i).get("COLUMN_NAME"), "column " + (i + 1));
                    eq(i + 1, rows.get(i).get("ORDINAL_POSITION"), "ORDINAL_POSITION " + (i + 1));
                    eq("demo", rows.get(i).get("TABLE_CAT"), "TABLE_CAT");
                    eq("dbo", rows.get(i).get("TABLE_SCHEM"), "TABLE_SCHEM");
                    eq("orders", rows.get(i).get("TABLE_NAME"), "TABLE_NAME");
                }
                Map<String, Object> id = rows.get(0), cust = rows.get(1), amt = rows.get(2), ts = rows.get(4);
                eq(Types.INTEGER, id.get("DATA_TYPE"), "int DATA_TYPE");
                eq("int", id.get("TYPE_NAME"), "int TYPE_NAME");
                eq(10, id.get("COLUMN_SIZE"), "int COLUMN_SIZE");
                eq(0, id.get("DECIMAL_DIGITS"), "int DECIMAL_DIGITS");
                eq(10, id.get("NUM_PREC_RADIX"), "int NUM_PREC_RADIX");
                eq(DatabaseMetaData.columnNoNulls, id.get("NULLABLE"), "int NULLABLE");
                eq("NO", id.get("IS_NULLABLE"), "int IS_NULLABLE");
                eq("NO", id.get("IS_AUTOINCREMENT"), "IS_AUTOINCREMENT");
                eq("NO", id.get("IS_GENERATEDCOLUMN"), "IS_GENERATEDCOLUMN");
                eq(Types.NVARCHAR, cust.get("DATA_TYPE"), "nvarchar DATA_TYPE (ODBC -9 mapped)");
                eq("nvarchar", cust.get("TYPE_NAME"), "nvarchar TYPE_NAME");
                eq(40, cust.get("COLUMN_SIZE"), "nvarchar COLUMN_SIZE");
                eq(80, cust.get("CHAR_OCTET_LENGTH"), "nvarchar CHAR_OCTET_LENGTH");
                eq(DatabaseMetaData.columnNullable, cust.get("NULLABLE"), "nvarchar NULLABLE");
                eq("YES", cust.get("IS_NULLABLE"), "nvarchar IS_NULLABLE");
                eq(Types.DECIMAL, amt.get("DATA_TYPE"), "decimal DATA_TYPE");
                eq(12, amt.get("COLUMN_SIZE"), "decimal COLUMN_SIZE");
                eq(2, amt.get("DECIMAL_DIGITS"), "decimal DECIMAL_DIGITS");
                eq(Types.TIMESTAMP, ts.get("DATA_TYPE"), "datetime2 DATA_TYPE");
                eq("datetime2", ts.get("TYPE_NAME"), "datetime2 TYPE_NAME");
                eq(27, ts.get("COLUMN_SIZE"), "datetime2(7) COLUMN_SIZE");
                eq(7, ts.get("DECIMAL_DIGITS"), "datetime2(7) DECIMAL_DIGITS");
                List<String> procs = new ArrayList<>();
                for (String b : w.statements()) {
                    Matcher m = Pattern.compile("EXEC (sp_columns_\\d+)").matcher(b);
                    while (m.find()) {
                        procs.add(m.group(1));
                    }
                }
                eq(major >= 13 ? List.of("sp_columns_170", "sp_columns_100") : List.of("sp_columns_100"), procs,
                        "procedures");
                eq(1, rows(c.getMetaData().getColumns(null, "dbo", "orders", "amount")).size(), "one column");
                eq(0, rows(c.getMetaData().getColumns(null, "dbo", "nope", null)).size(), "unknown table");
            }
        });
        test("metadata: getColumns of the change table (cdc.dbo_orders_CT: binary(10), varbinary(128))", () -> {
            try (Connection c = connect("plain", "")) {
                List<Map<String, Object>> rows = rows(c.getMetaData().getColumns(null, "cdc", "dbo_orders_CT", null));
                Map<String, Map<String, Object>> by = new LinkedHashMap<>();
                for (Map<String, Object> r : rows) {
                    by.put((String) r.get("COLUMN_NAME"), r);
                }
                eq(List.of("__$start_lsn", "__$end_lsn", "__$seqval", "__$operation", "__$update_mask", "order_id",
                        "customer", "amount", "status", "created_at", "__$command_id"), new ArrayList<>(by.keySet()),
                        "columns");
                eq(Types.BINARY, by.get("__$start_lsn").get("DATA_TYPE"), "binary DATA_TYPE");
                eq("binary", by.get("__$start_lsn").get("TYPE_NAME"), "binary TYPE_NAME");
                eq(10, by.get("__$start_lsn").get("COLUMN_SIZE"), "binary(10) COLUMN_SIZE");
                eq(Types.VARBINARY, by.get("__$update_mask").get("DATA_TYPE"), "varbinary DATA_TYPE");
                eq(128, by.get("__$update_mask").get("COLUMN_SIZE"), "varbinary(128) COLUMN_SIZE");
            }
        });
        test("metadata: getPrimaryKeys (sp_pkeys)", () -> {
            try (Connection c = connect("plain", "")) {
                List<Map<String, Object>> rows = rows(c.getMetaData().getPrimaryKeys(null, "dbo", "orders"));
                eq(1, rows.size(), "rows: " + rows);
                Map<String, Object> r = rows.get(0);
                eq("demo", r.get("TABLE_CAT"), "TABLE_CAT");
                eq("dbo", r.get("TABLE_SCHEM"), "TABLE_SCHEM");
                eq("orders", r.get("TABLE_NAME"), "TABLE_NAME");
                eq("order_id", r.get("COLUMN_NAME"), "COLUMN_NAME");
                eq((short) 1, ((Number) r.get("KEY_SEQ")).shortValue(), "KEY_SEQ");
                eq("PK_orders", r.get("PK_NAME"), "PK_NAME");
                eq(0, rows(c.getMetaData().getPrimaryKeys(null, "dbo", "nope")).size(), "unknown table");
            }
        });
        test("metadata: getIndexInfo (sp_statistics into a table variable, UNION ALL sys.indexes)", () -> {
            try (Connection c = connect("plain", "")) {
                Wire w = new Wire(c, "plain");
                List<Map<String, Object>> rows =
                        rows(c.getMetaData().getIndexInfo(null, "dbo", "orders", false, false));
                eq(2, rows.size(), "table statistic + PK column: " + rows);
                Map<String, Object> stat = rows.get(0), pk = rows.get(1);
                eq((short) DatabaseMetaData.tableIndexStatistic, ((Number) stat.get("TYPE")).shortValue(), "TYPE 0");
                eq(null, stat.get("INDEX_NAME"), "statistic has no index name");
                eq("PK_orders", pk.get("INDEX_NAME"), "INDEX_NAME");
                eq((short) DatabaseMetaData.tableIndexClustered, ((Number) pk.get("TYPE")).shortValue(),
                        "clustered");
                eq(false, asBool(pk.get("NON_UNIQUE")), "unique");
                eq("order_id", pk.get("COLUMN_NAME"), "COLUMN_NAME");
                eq((short) 1, ((Number) pk.get("ORDINAL_POSITION")).shortValue(), "ORDINAL_POSITION");
                eq("A", pk.get("ASC_OR_DESC"), "ASC_OR_DESC");
                mustContain(w.text(), "sp_statistics", "sp_statistics called");
                mustNotContain(w.text(), "Msg ", "no error on the way (no fallback)");
                eq(1, rows(c.getMetaData().getIndexInfo(null, "dbo", "orders", true, true)).size() - 1,
                        "unique=true keeps the PK");
            }
        });
        test("metadata: getSchemas and getCatalogs", () -> {
            try (Connection c = connect("plain", "")) {
                List<String> schemas = new ArrayList<>();
                for (Map<String, Object> r : rows(c.getMetaData().getSchemas())) {
                    schemas.add((String) r.get("TABLE_SCHEM"));
                }
                mustContain(schemas.toString(), "cdc", "cdc schema");
                mustContain(schemas.toString(), "dbo", "dbo schema");
                List<String> cats = new ArrayList<>();
                for (Map<String, Object> r : rows(c.getMetaData().getCatalogs())) {
                    cats.add((String) r.get("TABLE_CAT"));
                }
                mustContain(cats.toString(), "demo", "demo database");
            }
        });
    }

    // --- session settings ------------------------------------------------------------------------------

    static void sessionSettings() {
        test("SET LOCK_TIMEOUT is kept by the session (@@LOCK_TIMEOUT)", () -> {
            try (Connection c = connect("plain", "")) {
                eq(-1, scalarInt(c, "SELECT @@LOCK_TIMEOUT"), "default");
                exec(c, "SET LOCK_TIMEOUT 10000");
                eq(10000, scalarInt(c, "SELECT @@LOCK_TIMEOUT"), "after SET");
                exec(c, "SET LOCK_TIMEOUT 0");
                eq(0, scalarInt(c, "SELECT @@LOCK_TIMEOUT"), "0");
                try (Connection d = connect("plain", "")) {
                    eq(-1, scalarInt(d, "SELECT @@LOCK_TIMEOUT"), "another session keeps the default");
                }
            }
        });
        test("isolation levels: setTransactionIsolation sends SET TRANSACTION ISOLATION LEVEL; the session "
                + "reports it (sys.dm_exec_sessions)", () -> {
            try (Connection c = connect("plain", "")) {
                int[][] levels = {{Connection.TRANSACTION_READ_UNCOMMITTED, 1},
                        {Connection.TRANSACTION_READ_COMMITTED, 2},
                        {Connection.TRANSACTION_REPEATABLE_READ, 3}, {Connection.TRANSACTION_SERIALIZABLE, 4}};
                for (int[] l : levels) {
                    c.setTransactionIsolation(l[0]);
                    eq(l[0], c.getTransactionIsolation(), "driver");
                    eq(l[1], scalarInt(c, "SELECT transaction_isolation_level FROM sys.dm_exec_sessions "
                            + "WHERE session_id = @@SPID"), "server for " + l[0]);
                }
            }
        });
        test("isolation levels: SNAPSHOT in a database without ALLOW_SNAPSHOT_ISOLATION is Msg 3952 on access",
                () -> {
            try (Connection c = connect("plain", "")) {
                c.setTransactionIsolation(4096);          // SQLServerConnection.TRANSACTION_SNAPSHOT
                eq(5, scalarInt(c, "SELECT transaction_isolation_level FROM sys.dm_exec_sessions "
                        + "WHERE session_id = @@SPID"), "SNAPSHOT is 5");
                expectSqlError(() -> exec(c, "SELECT TOP (1) order_id FROM dbo.orders"), 3952, null, 16);
                c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
                exec(c, "SELECT TOP (1) order_id FROM dbo.orders");
            }
        });
        test("Debezium's snapshot statements: SET LOCK_TIMEOUT, REPEATABLE READ, TABLOCKX probe, max LSN", () -> {
            try (Connection c = connect("plain", "")) {
                c.setAutoCommit(false);
                exec(c, "SET LOCK_TIMEOUT 10000");
                c.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
                Savepoint sp = c.setSavepoint("dbz_schema_snapshot");
                exec(c, "SELECT TOP(0) * FROM [demo].[dbo].[orders] WITH (TABLOCKX)");
                try (Statement s = c.createStatement();
                     ResultSet rs = s.executeQuery("SELECT [demo].sys.fn_cdc_get_max_lsn()")) {
                    rs.next();
                    eq(10, rs.getBytes(1).length, "max lsn");
                }
                c.rollback(sp);
                exec(c, "SELECT * FROM [demo].[dbo].[orders]");
                c.commit();
                c.setAutoCommit(true);
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "no transaction left");
            }
        });
    }

    // --- transactions and savepoints -------------------------------------------------------------------

    static void transactions() {
        test("transactions: setAutoCommit(false) = implicit transactions; a SELECT FROM a table opens one", () -> {
            try (Connection c = connect("plain", "")) {
                c.setAutoCommit(false);
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "SELECT without FROM opens none");
                eq(2, scalarInt(c, "SELECT @@OPTIONS & 2"), "IMPLICIT_TRANSACTIONS bit of @@OPTIONS");
                exec(c, "SELECT COUNT(*) FROM dbo.orders");
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "after a SELECT FROM a table");
                c.commit();
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "after commit");
                exec(c, "SELECT COUNT(*) FROM dbo.orders");
                c.rollback();
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "after rollback");
                c.setAutoCommit(true);
                exec(c, "SELECT COUNT(*) FROM dbo.orders");
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "autocommit again");
            }
        });
        test("savepoints: setSavepoint opens the transaction, rollback(savepoint) keeps it, commit ends it", () -> {
            try (Connection c = connect("plain", "")) {
                c.setAutoCommit(false);
                Savepoint a = c.setSavepoint("a");
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "setSavepoint starts exactly one transaction");
                Savepoint b = c.setSavepoint();
                exec(c, "SELECT COUNT(*) FROM dbo.orders");
                c.rollback(b);
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "rollback to a savepoint keeps the transaction");
                c.rollback(a);
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "still one");
                c.commit();
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "after commit");
            }
        });
        test("savepoints: T-SQL errors 628 (SAVE TRAN outside a transaction) and 6401 (unknown savepoint)", () -> {
            try (Connection c = connect("plain", "")) {
                expectSqlError(() -> exec(c, "SAVE TRANSACTION x"), 628, null, 16);
                exec(c, "BEGIN TRAN; SAVE TRAN s1");
                expectSqlError(() -> exec(c, "ROLLBACK TRAN nope"), 6401, null, 16);
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "6401 leaves the transaction open");
                exec(c, "ROLLBACK TRAN s1");
                eq(1, scalarInt(c, "SELECT @@TRANCOUNT"), "rollback to s1");
                exec(c, "IF @@TRANCOUNT > 0 ROLLBACK TRAN");
                eq(0, scalarInt(c, "SELECT @@TRANCOUNT"), "rolled back");
            }
        });
        test("transactions: IF ... BEGIN ... END ELSE as the driver and Debezium write it", () -> {
            try (Connection c = connect("plain", "")) {
                eq("no", scalarString(c, "DECLARE @r nvarchar(10); IF @@TRANCOUNT > 0 SET @r = N'yes' ELSE "
                        + "SET @r = N'no'; SELECT @r"), "ELSE branch");
                eq("2", scalarString(c, "IF 1 = 1 BEGIN SELECT 2 END ELSE BEGIN SELECT 3 END"), "BEGIN..END");
                eq(1, scalarInt(c, "IF EXISTS (SELECT 1 FROM sys.tables WHERE name = N'orders') SELECT 1 "
                        + "ELSE SELECT 0"), "IF EXISTS");
            }
        });
    }

    // --- Windows authentication: Kerberos ----------------------------------------------------------------

    /**
     * integratedSecurity=true;authenticationScheme=JavaKerberos with the keytab of a principal of the run's
     * throwaway MIT KDC (test/lib/kdc.py) through a JAAS configuration, as a Linux service reaches SQL Server:
     * the simulator accepts the AP-REQ with its service account's keytab and admits the principal as the
     * Windows login FINALIZE\<principal> (created by run).
     */
    static void kerberos(String tag) {
        test("login: Kerberos (integratedSecurity, JavaKerberos, keytab through JAAS) is the Windows login", () -> {
            String conf = CFG.getProperty("krb5.conf");
            if (conf == null) {
                throw new AssertionError("no KDC for the run: " + CFG.getProperty("kdc.error"));
            }
            System.setProperty("java.security.krb5.conf", conf);
            Path jaas = Paths.get(CFG.getProperty("work"), "jaas-" + tag + ".conf");
            Files.write(jaas, ("SQLJDBCDriver {\n  com.sun.security.auth.module.Krb5LoginModule required\n"
                    + "  useKeyTab=true keyTab=\"" + CFG.getProperty("krb.keytab") + "\"\n"
                    + "  principal=\"" + CFG.getProperty("krb.principal") + "\" doNotPrompt=true storeKey=false;\n};\n")
                    .getBytes(StandardCharsets.UTF_8));
            System.setProperty("java.security.auth.login.config", jaas.toString());
            String spn = "MSSQLSvc/127.0.0.1:" + port("plain") + "@" + CFG.getProperty("krb.realm");
            int spid;
            try (Connection c = DriverManager.getConnection(url("plain",
                    "integratedSecurity=true;authenticationScheme=JavaKerberos;serverSpn=" + spn))) {
                eq(CFG.getProperty("krb.login"), scalarString(c, "SELECT SUSER_SNAME()"), "SUSER_SNAME()");
                eq(2, scalarInt(c, "SELECT TOP 1 __$operation FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, "
                        + "__$seqval"), "the first change read through SELECT ON SCHEMA::cdc is an insert");
                spid = scalarInt(c, "SELECT @@SPID");
                try (Connection sa = connect("plain", "")) {
                    eq("KERBEROS", scalarString(sa, "SELECT auth_scheme FROM sys.dm_exec_connections "
                            + "WHERE session_id = " + spid), "auth_scheme of the session");
                }
            }
        });
    }

    // --- helpers ------------------------------------------------------------------------------------------

    static void test(String name, Body b) {
        long t0 = System.nanoTime();
        try {
            b.run();
            passed++;
            System.out.println("ok - [" + driver + "] " + name);
            double secs = (System.nanoTime() - t0) / 1e9;
            if (secs >= 1.0) {
                System.out.printf("#   %.1f s%n", secs);
            }
        } catch (Throwable t) {
            failed++;
            System.out.println("not ok - [" + driver + "] " + name + ": " + describe(t));
            StackTraceElement[] st = t.getStackTrace();
            for (int i = 0; i < Math.min(6, st.length); i++) {
                System.out.println("#   at " + st[i]);
            }
            if (t.getCause() != null) {
                System.out.println("#   cause: " + describe(t.getCause()));
            }
        }
        System.out.flush();
    }

    static String describe(Throwable t) {
        if (t instanceof SQLServerException && ((SQLServerException) t).getSQLServerError() != null) {
            SQLServerError e = ((SQLServerException) t).getSQLServerError();
            return "Msg " + e.getErrorNumber() + ", Level " + e.getErrorSeverity() + ", State " + e.getErrorState()
                    + ": " + e.getErrorMessage();
        }
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    static int port(String mode) {
        return Integer.parseInt(CFG.getProperty(mode + ".port"));
    }

    static String url(String mode, String extra) {
        String enc = mode.equals("plain") ? "encrypt=false;" : "";
        return "jdbc:sqlserver://127.0.0.1:" + port(mode) + ";databaseName=demo;loginTimeout=15;"
                + "applicationName=finalize-jdbc-peer;" + enc + extra;
    }

    static Connection connect(String mode, String extra) throws SQLException {
        return DriverManager.getConnection(url(mode, extra), "sa", PASSWORD);
    }

    /** Runs a batch, reading every result; returns the number of result sets. */
    static int exec(Connection c, String sql) throws SQLException {
        int sets = 0;
        try (Statement s = c.createStatement()) {
            boolean rs = s.execute(sql);
            while (true) {
                if (rs) {
                    sets++;
                    try (ResultSet r = s.getResultSet()) {
                        while (r.next()) {
                            // drain
                        }
                    }
                } else if (s.getUpdateCount() == -1) {
                    break;
                }
                rs = s.getMoreResults();
            }
        }
        return sets;
    }

    static int scalarInt(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            if (!rs.next()) {
                throw new AssertionError("no row: " + sql);
            }
            return rs.getInt(1);
        }
    }

    static String scalarString(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            if (!rs.next()) {
                throw new AssertionError("no row: " + sql);
            }
            return rs.getString(1);
        }
    }

    static String one(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) {
                throw new AssertionError("no row");
            }
            return rs.getString(1);
        }
    }

    static List<Map<String, Object>> rows(ResultSet rs) throws SQLException {
        List<Map<String, Object>> out = new ArrayList<>();
        try (rs) {
            ResultSetMetaData md = rs.getMetaData();
            while (rs.next()) {
                Map<String, Object> r = new LinkedHashMap<>();
                for (int i = 1; i <= md.getColumnCount(); i++) {
                    r.put(md.getColumnLabel(i), rs.getObject(i));
                }
                out.add(r);
            }
        }
        return out;
    }

    static byte[][] lsnRange(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(
                "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders'), sys.fn_cdc_get_max_lsn()")) {
            rs.next();
            return new byte[][] {rs.getBytes(1), rs.getBytes(2)};
        }
    }

    static int compare(byte[] a, byte[] b) {
        int n = Arrays.compareUnsigned(a, b);
        return Integer.signum(n);
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    static boolean asBool(Object o) {
        if (o instanceof Boolean) {
            return (Boolean) o;
        }
        return ((Number) o).intValue() != 0;
    }

    static void eq(Object want, Object got, String what) {
        if (want instanceof Number && got instanceof Number && !(want instanceof BigDecimal)) {
            if (((Number) want).doubleValue() == ((Number) got).doubleValue()) {
                return;
            }
        }
        if (!Objects.equals(want, got)) {
            throw new AssertionError(what + ": expected <" + want + "> but got <" + got + ">");
        }
    }

    static void mustContain(String text, String part, String what) {
        if (text == null || !text.contains(part)) {
            throw new AssertionError(what + ": <" + part + "> not in <" + text + ">");
        }
    }

    static void mustNotContain(String text, String part, String what) {
        if (text != null && text.contains(part)) {
            throw new AssertionError(what + ": <" + part + "> in <" + text + ">");
        }
    }

    interface Thrower {
        Object run() throws Exception;
    }

    static SQLServerException expectSqlError(Thrower body, int number, Integer state, int severity) throws Exception {
        try {
            Object r = body.run();
            if (r instanceof AutoCloseable) {
                ((AutoCloseable) r).close();
            }
        } catch (SQLServerException e) {
            SQLServerError err = e.getSQLServerError();
            if (err == null) {
                throw new AssertionError("expected Msg " + number + ", got a driver error: " + e.getMessage());
            }
            eq(number, e.getErrorCode(), "getErrorCode() (" + describe(e) + ")");
            eq(number, err.getErrorNumber(), "error number");
            if (state != null) {
                eq(state, err.getErrorState(), "state (" + describe(e) + ")");
            }
            eq(severity, err.getErrorSeverity(), "class (" + describe(e) + ")");
            return e;
        }
        throw new AssertionError("expected Msg " + number + ", no error");
    }

    static SQLException expectFailure(Thrower body, Integer number, String pattern, String what) throws Exception {
        try {
            Object r = body.run();
            if (r instanceof AutoCloseable) {
                ((AutoCloseable) r).close();
            }
        } catch (SQLException e) {
            String text = e.getMessage() + (e.getCause() != null ? " " + e.getCause() : "");
            if (!Pattern.compile(pattern, Pattern.CASE_INSENSITIVE).matcher(text).find()) {
                throw new AssertionError(what + ": unexpected error " + describe(e));
            }
            if (number != null) {
                eq(number, e.getErrorCode(), "error code");
            }
            return e;
        }
        throw new AssertionError(what + ": no error");
    }

    static String makeTruststore(String pem, String name) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        try (InputStream in = new FileInputStream(pem)) {
            ks.setCertificateEntry(name, CertificateFactory.getInstance("X.509").generateCertificate(in));
        }
        Path p = Paths.get(CFG.getProperty("work"), "truststore-" + name + "-" + driver + ".p12");
        try (FileOutputStream out = new FileOutputStream(p.toFile())) {
            ks.store(out, "changeit".toCharArray());
        }
        return p.toString();
    }

    // --- what the simulator saw of a session (its DEBUG log) ----------------------------------------------

    static List<String> sessionLines(String mode, int spid) throws Exception {
        List<String> out = new ArrayList<>();
        String marker = " session " + spid + ": ";
        for (String line : Files.readAllLines(Paths.get(CFG.getProperty(mode + ".log")), StandardCharsets.UTF_8)) {
            int i = line.indexOf(marker);
            if (i >= 0) {
                out.add(line.substring(i + marker.length()));
            }
        }
        return out;
    }

    /** The simulator's log from now on for one connection's session. */
    static final class Wire {
        final String mode;
        final int spid;
        final int skip;

        Wire(Connection c, String mode) throws Exception {
            this.mode = mode;
            this.spid = scalarInt(c, "SELECT @@SPID");
            this.skip = sessionLines(mode, spid).size();
        }

        List<String> lines() throws Exception {
            List<String> all = sessionLines(mode, spid);
            return all.subList(Math.min(skip, all.size()), all.size());
        }

        String text() throws Exception {
            return String.join("\n", lines());
        }

        List<String> rpcs() throws Exception {
            List<String> out = new ArrayList<>();
            for (String l : lines()) {
                if (l.startsWith("rpc ")) {
                    out.add(l.substring(4).split(" ", 2)[0]);
                }
            }
            return out;
        }

        List<String> batches() throws Exception {
            List<String> out = new ArrayList<>();
            for (String l : lines()) {
                if (l.startsWith("batch ")) {
                    out.add(l.substring(6));
                }
            }
            return out;
        }

        /** Batch texts and RPC lines (with their statement parameters). */
        List<String> statements() throws Exception {
            List<String> out = new ArrayList<>();
            for (String l : lines()) {
                if (l.startsWith("batch ") || l.startsWith("rpc ")) {
                    out.add(l);
                }
            }
            return out;
        }
    }

    /** 'login', 'full' or '' (no TLS) for the session of ``c``, from the simulator's log. */
    static String sessionEncryption(Connection c, String mode) throws Exception {
        int spid = scalarInt(c, "SELECT @@SPID");
        for (String l : sessionLines(mode, spid)) {
            Matcher m = Pattern.compile("encryption (full|login)").matcher(l);
            if (m.find()) {
                return m.group(1);
            }
        }
        return "";
    }

    static String loginFeatures(Connection c, String mode) throws Exception {
        int spid = scalarInt(c, "SELECT @@SPID");
        StringBuilder sb = new StringBuilder();
        for (String l : sessionLines(mode, spid)) {
            if (l.startsWith("LOGIN7 ")) {
                sb.append(l).append(' ');
            }
        }
        return sb.toString();
    }
}
