"""One client connection: PRELOGIN, LOGIN7, then requests until the client leaves."""
import logging
import socket
import struct
import time

from . import collation, functions
from . import permissions as P
from . import login as LG
from . import packets as PK
from . import rpc as R
from . import sqltypes as T
from . import timeutil
from . import tls as TLS
from . import tokens as K
from . import winauth as WA
from .errors import Attention, ClientGone, SqlError
from .executor import Executor

log = logging.getLogger("mssql-sim")


class Session:
    """State of one connection; also the context the T-SQL translator resolves against."""

    def __init__(self, server, sock, spid, peer):
        self.server = server
        self.db = server.db          # the current database (in master: the user database used last)
        self.channel = PK.Channel(sock, spid)
        self.spid = spid
        self.peer = peer
        self.login = None
        self.database = None
        self.hostname = self.appname = ""
        self.conn = None
        self.variables = {}
        self.udf_error = None
        self.drop_after_rows = None
        self.trancount = 0
        self.tran_id = 0
        self.wire = T.Wire()        # negotiated TDS version and TEXTSIZE (set at login, SET TEXTSIZE)
        self.table_vars = {}        # DECLARE @t TABLE: name -> catalog.Table (a sqlite temp table), per scope
        self.tv_tables = []         # temp tables of this request's table variables (dropped when it ends)
        self.tv_counter = 0
        self.prepared = {}          # sp_prepare/sp_prepexec handle -> (parameter declarations, statement)
        self.next_handle = 1
        self.implicit_transactions = False      # SET IMPLICIT_TRANSACTIONS (the JDBC driver's autocommit off)
        self.lock_timeout = -1                  # SET LOCK_TIMEOUT (ms; -1 = wait forever)
        self.isolation = 2                      # sys.dm_exec_sessions.transaction_isolation_level: READ COMMITTED
        self.savepoints = []                    # SAVE TRANSACTION names of the open transaction
        self.tran_name = None
        self.login_time = None
        self.client_interface = ""
        self.auth_scheme = None                 # SQL | NTLM | KERBEROS (sys.dm_exec_connections.auth_scheme)
        self.principal = None                   # who authenticated: the SQL login, user@REALM or DOMAIN\\user
        self.sspi_reply = b""                   # SSPI token (Kerberos AP-REP) sent ahead of LOGINACK
        self.executor = Executor(self)
        self.closed = False

    # --- life cycle ------------------------------------------------------------------------

    def run(self):
        """Serve the connection; any failure only ends this session."""
        try:
            if self.handshake():
                self.loop()
        except ClientGone:
            pass
        except Exception:
            log.exception("session %d failed", self.spid)
        finally:
            self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.channel.close()
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.server.forget(self)

    def drop_connection(self):
        """Fault: send what is buffered (a partial result, no EOM) and close the socket."""
        try:
            self.channel.flush_partial()
        finally:
            self.channel.close()
        raise ClientGone("dropped by fault")

    # --- login ---------------------------------------------------------------------------

    def handshake(self):
        typ, status, payload = self.channel.read_message()
        if typ == PK.PRELOGIN:
            if not self.prelogin(payload):
                return False
            typ, status, payload = self.channel.read_message()
        elif self.server.tls_mode == TLS.FORCED:
            return False                    # no PRELOGIN, no encryption: refused like SQL Server
        if typ != PK.LOGIN7:
            return False
        try:
            lg = LG.parse_login7(payload)
        except (ValueError, struct.error) as e:
            log.warning("session %d: malformed LOGIN7 (%s): connection closed", self.spid, e)
            return False
        self.hostname, self.appname = lg.hostname, lg.appname
        self.client_interface = lg.client_interface
        base = self.server.instance.logins.get((lg.username or "").lower())
        asked = lg.database or (base.default_db if base else "")
        f = self.server.faults.take("hang_login", lg.username, database=asked)
        if f:
            log.info("session %d: login of %s to %s held (fault)", self.spid, lg.username, asked or "?")
            self.hold(f)
        acks = LG.feature_acks(lg.features)
        log.debug("session %d: LOGIN7 TDS 0x%08X%s features %s; ack %s", self.spid, lg.tds_version,
                  " fODBC" if lg.odbc else "",
                  " ".join("%s(%d)" % (LG.feature_name(f), len(d)) for f, d in lg.features or ()) or "none",
                  " ".join(LG.feature_name(f) for f, _ in acks) or "none")
        tds = LG.negotiate(lg.tds_version)
        err = self.authenticate(lg) if tds else [SqlError(
            50000, "The simulator speaks TDS 7.1 to 7.4; the client asked for 0x%08X." % lg.tds_version, 16, 1)]
        if tds:
            self.wire.tds = self.channel.tds = tds
        if lg.odbc:
            # MS-TDS 2.2.6.4 fODBC: the server sets the ODBC defaults, TEXTSIZE infinite among them (the JDBC
            # driver sets it and never sends SET TEXTSIZE)
            self.wire.set_textsize(T.UNLIMITED_TEXTSIZE)
        if err:
            msgs = b"".join(K.message(e.number, e.message, e.cls, e.state, tds=self.channel.tds) for e in err)
            self.channel.send_message(msgs + K.done(K.ERROR, 0, 0, tds=self.channel.tds))
            return False
        size = lg.packet_size if 512 <= lg.packet_size <= self.server.cfg.packet_size_max else 4096
        if lg.packet_size > self.server.cfg.packet_size_max:
            size = self.server.cfg.packet_size_max
        self.open_storage()
        self.login_time = self.constant("getdate", self.db.wall_now())
        resp = ((K.sspi(self.sspi_reply) if self.sspi_reply else b"")
                + K.env_database(self.database, "master")
                + K.message(5701, "Changed database context to '%s'." % self.database, 0, 2, tds=tds)
                + collation.env_change(self.db.collation)
                + K.env_language("us_english")
                + K.message(5703, "Changed language setting to us_english.", 0, 1, tds=tds)
                + K.loginack("Microsoft SQL Server", self.server.version, tds)
                + (K.featureextack(acks) if acks else b"")
                + K.env_packet_size(size, 4096)
                + K.done(0, 0, 0, tds=tds))
        self.channel.send_message(resp)
        self.channel.packet_size = size
        return True

    def prelogin(self, payload):
        """Answer PRELOGIN with the negotiated ENCRYPTION byte (tls.ANSWER), then run the TLS handshake
        if encryption was agreed.  False when the connection ends here."""
        opt = LG.parse_prelogin(payload).get(0x01)
        client = opt[0] if opt else None
        answer, then = TLS.negotiate(client, self.server.tls_mode)
        self.channel.send_raw_packet(PK.REPLY, LG.prelogin_reply(self.server.version, answer))
        if then == TLS.CLOSE:
            if answer == TLS.ENCRYPT_REQ:
                log.warning("%s [CLIENT: %s]", TLS.MSG_17835, self.peer[0] if self.peer else "?")
            else:
                log.warning("client %s requires encryption (PRELOGIN ENCRYPTION 0x%02x) but the server has no "
                            "certificate (--tls-cert): connection closed", self.peer and self.peer[0], client)
            return False
        if then in (TLS.FULL, TLS.LOGIN_ONLY):
            f = self.server.faults.take("stall_tls")
            if f:
                log.info("session %d: TLS handshake held (fault)", self.spid)
                self.hold(f)
            try:
                desc = self.channel.start_tls(self.server.tls_context, login_only=then == TLS.LOGIN_ONLY)
            except ClientGone as e:          # e.g. the client rejected the certificate and hung up
                log.info("session %d: no TLS session: %s", self.spid, e)
                raise
            log.info("session %d: %s, encryption %s", self.spid, desc, self.channel.encryption)
        return True

    def authenticate(self, lg):
        """-> list of SqlErrors (empty on success).  A Windows login (LOGIN7 fIntSecurity) runs the SSPI
        exchange first (winauth.py: Kerberos or NTLM) and is then admitted as its DOMAIN\\user login; the
        attempt is recorded for sim.logins."""
        wa = self.server.winauth
        self.sspi_reply = b""
        if lg.sspi:
            scheme = "NTLM" if lg.sspi_blob.startswith(WA.NTLMSSP) else "KERBEROS"
            try:
                scheme, name, principal, self.sspi_reply = wa.handshake(self, lg.sspi_blob)
            except SqlError as e:
                wa.record(self, scheme, None, getattr(e, "principal", None), e.number)
                return [e]
        else:
            scheme, name, principal = "SQL", lg.username, lg.username
        self.auth_scheme, self.principal = scheme, principal
        errs = self.admit(lg, name, windows=lg.sspi)
        wa.record(self, scheme, name, principal, errs[-1].number if errs else 0)
        return errs

    def admit(self, lg, name, windows):
        """The login ``name`` (authenticated by Windows, or checked here against its SQL password) and its
        database -> list of SqlErrors.  Applies the refuse-login fault."""
        failed = SqlError(18456, "Login failed for user '%s'." % name, 14, 1)
        inst = self.server.instance
        base = inst.logins.get((name or "").lower())
        asked = lg.database or (base.default_db if base else "")
        f = self.server.faults.take("refuse_login", name, database=asked)
        if f:
            return [SqlError(f.number, f.message or failed.message, f.cls, f.state)]
        if base is None or base.windows != windows or (not windows and base.password != lg.password):
            return [failed]
        dbname = lg.database or base.default_db or self.db.name
        target = inst.database(dbname)
        if dbname.lower() == "master":
            self.database = "master"
            self.login = self.db.login(name)
            return []
        if target is None or not P.can_open_database(target.login(name), dbname, target.name):
            if not lg.database:
                return [SqlError(4064, "Cannot open user default database. Login failed.", 11, 1), failed]
            return [SqlError(4060, 'Cannot open database "%s" requested by the login. The login failed.' % dbname,
                             11, 1), failed]
        self.db = target
        self.login = target.login(name)
        self.database = target.name
        return []

    def open_storage(self):
        """The session's read-only sqlite connection to its current database, with the sim_* functions."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = self.db.connect(readonly=True)
        functions.register(self.conn, self)

    def switch_database(self, name):
        """USE: ``name`` is master or a user database (checked by the caller)."""
        if name.lower() == "master":
            self.database = "master"
            return
        db = self.server.instance.database(name)
        login = db.login(self.login.name)
        if db is not self.db:
            self.executor.end_request()          # table variables live in the old connection
            self.db = db
            self.open_storage()
        self.login = login
        self.database = db.name

    def database_id(self):
        """DB_ID() of the current database."""
        return 1 if (self.database or "").lower() == "master" else self.db.db_id

    def hold(self, fault):
        """Say nothing while a fault holds this connection: until ``fault.seconds`` pass (None: forever),
        sim.fault_clear releases it, or the client goes away (ClientGone)."""
        end = None if fault.seconds is None else time.monotonic() + max(0.0, float(fault.seconds))
        try:
            while not fault.released.is_set():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return
                if self.peer_gone():
                    raise ClientGone("client left while held by a fault")
                fault.released.wait(0.05 if left is None else min(0.05, left))
        finally:
            self.server.faults.done(fault)

    def peer_gone(self):
        """Has the client closed or reset the connection?  (Linux TCP_INFO state; else a peek.)"""
        sock = self.channel.sock
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
            return info[0] not in (1,)                 # TCP_ESTABLISHED
        except (AttributeError, OSError):
            pass
        try:
            sock.setblocking(False)
            try:
                return sock.recv(1, socket.MSG_PEEK) == b""
            finally:
                sock.setblocking(True)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    # --- requests --------------------------------------------------------------------------

    def loop(self):
        """Serve requests; ALL_HEADERS exist from TDS 7.2, DONE's row count width depends on it too."""
        ch = self.channel
        headers = ch.tds >= T.TDS72
        while True:
            typ, status, payload = ch.read_message()
            if typ == PK.ATTENTION:
                ch.attention = False
                ch.send_message(K.done(K.ATTN, 0, 0, tds=ch.tds))
                continue
            if status & PK.STATUS_IGNORE:
                ch.send_message(K.done(0, 0, 0, tds=ch.tds))
                continue
            try:
                if typ == PK.SQL_BATCH:
                    text = R.batch_text(payload, headers)
                    log.debug("session %d: batch %r", self.spid, text)
                    self.executor.sql_batch(text)
                elif typ == PK.RPC:
                    call = R.parse_rpc(payload, headers)
                    log.debug("session %d: rpc %s %r", self.spid, call.name,
                              [(p.name, p.value, p.type.decl(), p.output) for p in call.params])
                    self.executor.rpc(call)
                elif typ == PK.TRANS_MGR:
                    ch.send_message(K.message(50000, "The simulator does not support transaction manager requests.",
                                              16, 1, tds=ch.tds) + K.done(K.ERROR, 0, 0, tds=ch.tds))
                else:
                    return
            except Attention:
                self.acknowledge_attention()
            except R.ProtocolError as e:
                ch.discard()
                ch.send_message(K.message(50000, "Protocol error: %s" % e, 16, 1, tds=ch.tds)
                                + K.done(K.ERROR, 0, 0, tds=ch.tds))

    def acknowledge_attention(self):
        """End the interrupted response, then send DONE(ATTN) as its own message (what tedious and
        FreeTDS both wait for)."""
        ch = self.channel
        ch.discard()
        ch.attention = False
        ch.send_message(K.done(0, 0, 0, tds=ch.tds))
        ch.send_message(K.done(K.ATTN, 0, 0, tds=ch.tds))

    def set_textsize(self, words):
        """SET TEXTSIZE n (the words after TEXTSIZE): an integer constant, else Msg 102."""
        text = "".join(words)
        try:
            n = int(text)
        except ValueError:
            raise SqlError(102, "Incorrect syntax near '%s'." % (words[-1] if words else "TEXTSIZE"), 15, 1)
        if n > T.UNLIMITED_TEXTSIZE or n < -1:
            raise SqlError(102, "Incorrect syntax near '%s'." % text, 15, 1)
        self.wire.set_textsize(n)

    def set_lock_timeout(self, words):
        """SET LOCK_TIMEOUT n: milliseconds, -1 = no time-out (an integer constant, else Msg 102)."""
        text = "".join(words)
        try:
            n = int(text)
        except ValueError:
            raise SqlError(102, "Incorrect syntax near '%s'." % (words[-1] if words else "LOCK_TIMEOUT"), 15, 1)
        if n < -1 or n > 2147483647:
            raise SqlError(102, "Incorrect syntax near '%s'." % text, 15, 1)
        self.lock_timeout = n

    ISOLATION_LEVELS = {"READ UNCOMMITTED": 1, "READ COMMITTED": 2, "REPEATABLE READ": 3, "SERIALIZABLE": 4,
                        "SNAPSHOT": 5}

    def set_isolation(self, words):
        """SET TRANSACTION ISOLATION LEVEL {READ UNCOMMITTED | READ COMMITTED | REPEATABLE READ | SNAPSHOT |
        SERIALIZABLE} (the words after TRANSACTION)."""
        text = " ".join(w.upper() for w in words)
        if not text.startswith("ISOLATION LEVEL ") or text[16:] not in self.ISOLATION_LEVELS:
            raise SqlError(102, "Incorrect syntax near '%s'." % (words[-1] if words else "TRANSACTION"), 15, 1)
        self.isolation = self.ISOLATION_LEVELS[text[16:]]

    def set_on_off(self, words):
        """The ON/OFF of a SET option (Msg 102 for anything else)."""
        if len(words) != 1 or words[0].upper() not in ("ON", "OFF"):
            raise SqlError(102, "Incorrect syntax near '%s'." % (words[-1] if words else "SET"), 15, 1)
        return words[0].upper() == "ON"

    # --- context for the translator --------------------------------------------------------

    def variable(self, name):
        v = self.variables.get(name)
        if v is None:
            raise SqlError(137, 'Must declare the scalar variable "@%s".' % name, 15, 2)
        return v

    def sysvar(self, name):
        srv = self.server
        table = {"VERSION": (srv.version_text, T.nvarchar(300)), "SPID": (self.spid, T.SMALLINT),
                 "SERVERNAME": ("MSSQLSIM", T.nvarchar(128)), "SERVICENAME": ("MSSQLSERVER", T.nvarchar(128)),
                 "TRANCOUNT": (self.trancount, T.INT), "ROWCOUNT": (0, T.INT), "ERROR": (0, T.INT),
                 "LANGUAGE": ("us_english", T.nvarchar(128)), "DATEFIRST": (7, T.TINYINT),
                 "LOCK_TIMEOUT": (self.lock_timeout, T.INT), "MAX_PRECISION": (38, T.TINYINT),
                 "TEXTSIZE": (self.wire.textsize, T.INT),
                 "IDENTITY": (None, T.SqlType("decimal", precision=38, scale=0)),
                 "OPTIONS": (5496 | (2 if self.implicit_transactions else 0), T.INT),     # 2: IMPLICIT_TRANS.
                 "MICROSOFTVERSION": (srv.microsoft_version, T.INT)}
        if name not in table:
            raise SqlError(137, 'Must declare the scalar variable "@@%s".' % name, 15, 2)
        return table[name]

    def constant(self, name, now):
        """Per-statement time values (SQL Server evaluates them once per statement)."""
        utc = now.replace(tzinfo=None)
        local = now.astimezone(self.db.tz)
        local_text = timeutil.naive_text(local.replace(tzinfo=None))
        if name == "sysutcdatetime":
            return timeutil.naive_text(utc)
        if name == "getutcdate":
            return timeutil.to_datetime(timeutil.naive_text(utc))
        if name == "sysdatetime":
            return local_text
        if name == "getdate":
            return timeutil.to_datetime(local_text)
        if name == "sysdatetimeoffset":
            return timeutil.dto_text(local_text, int(local.utcoffset().total_seconds() // 60))
        raise KeyError(name)

    def evaluate(self, sql, params):
        """Run a helper query (TVF arguments) on this session's snapshot -> first row."""
        return self.executor.query(sql, params).fetchone()
