"""Windows authentication as SQL Server does it: SSPI in LOGIN7 (MS-TDS 2.2.6.4 fIntSecurity, ibSSPI/cbSSPI/
cbSSPILong), the server's SSPI token 0xED (2.2.7.22) and the client's SSPI message, packet type 0x11 (2.2.6.8).

* Kerberos: the LOGIN7 blob is an AP-REQ (raw krb5 mechanism, as FreeTDS sends it, or wrapped in SPNEGO, as
  Windows SSPI and the JDBC driver may), accepted with GSSAPI (python3-gssapi, MIT krb5) from the keytab of the
  service account (``--kerberos-keytab``: every SPN of the account, or only ``--kerberos-spn``).  With mutual
  authentication the AP-REP goes back in an SSPI token ahead of LOGINACK.  The initiator ``user@REALM`` becomes
  ``DOMAIN\\user`` through ``--windows-realms REALM=DOMAIN``; a realm without a mapping is an untrusted domain.
* NTLM (MS-NLMP): NEGOTIATE in LOGIN7 -> CHALLENGE in an SSPI token -> AUTHENTICATE in a 0x11 packet.  The
  simulator is the domain controller of ``--windows-domain`` and knows its accounts' passwords
  (``sim.add_windows_account``); it accepts NTLMv2 only, as a domain whose policy "Network security: LAN
  Manager authentication level" is "Send NTLMv2 response only. Refuse LM & NTLM" (LmCompatibilityLevel 5;
  https://technet.microsoft.com/en-us/library/cc938105.aspx: "DCs refuse LM and NTLM (accept only NTLMv2
  authentication)").  The NTLMv2 check is MS-NLMP 3.3.2,
  https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-nlmp/5e550938-91d4-459f-b67d-75d70009e3f3.
* Every failure of the handshake is Msg 18452 class 14 (what SQL Server sends the client; the SSPI reason
  goes to its error log as 17806, here the simulator's log).
"""
import collections
import hashlib
import hmac
import logging
import os
import struct
import tempfile
import threading
import time

from .errors import SqlError

log = logging.getLogger("mssql-sim")

MSG_18452 = "Login failed. The login is from an untrusted domain and cannot be used with Integrated authentication."
SPNEGO_OID = b"\x06\x06\x2b\x06\x01\x05\x05\x02"          # 1.3.6.1.5.5.2 inside a GSS InitialContextToken
NTLMSSP = b"NTLMSSP\x00"
# NTLM negotiate flags (MS-NLMP 2.2.2.5)
UNICODE, OEM, REQUEST_TARGET, NTLM_FLAG = 0x1, 0x2, 0x4, 0x200
ALWAYS_SIGN, TARGET_TYPE_DOMAIN, EXTENDED_SESSIONSECURITY = 0x8000, 0x10000, 0x80000
TARGET_INFO, VERSION, F128, KEY_EXCH, F56 = 0x800000, 0x2000000, 0x20000000, 0x40000000, 0x80000000


def untrusted(reason, principal=None):
    """Msg 18452 for the client; the reason (17806 on SQL Server) only in the simulator's log; ``principal``
    (who tried, when known) for sim.logins."""
    log.warning("SSPI handshake failed: %s", reason)
    e = SqlError(18452, MSG_18452, 14, 1)
    e.principal = principal
    return e


def md4(data):
    """MD4 (OpenSSL 3 disables hashlib's md4; pycryptodome has it)."""
    try:
        from Cryptodome.Hash import MD4
    except ImportError:                      # pip's pycryptodome
        from Crypto.Hash import MD4
    return MD4.new(data).digest()


def ntowfv2(password, user, domain):
    """MS-NLMP 3.3.2: HMAC_MD5(MD4(UNICODE(Passwd)), UNICODE(Uppercase(User) + UserDom))."""
    return hmac.new(md4(password.encode("utf-16-le")), (user.upper() + domain).encode("utf-16-le"),
                    hashlib.md5).digest()


def _field(msg, at):
    """(Len, MaxLen, Offset) field at ``at`` -> its bytes (ValueError outside the message)."""
    n, _max, off = struct.unpack("<HHI", msg[at:at + 8])
    if off + n > len(msg):
        raise ValueError("NTLM field past the message")
    return msg[off:off + n]


def _av_pairs(pairs):
    return b"".join(struct.pack("<HH", k, len(v)) + v for k, v in pairs) + b"\x00\x00\x00\x00"


class WindowsAuth:
    """The instance's Windows side: its domain, the accounts it verifies NTLM against, the keytab, and the
    record of recent logins (``sim.logins``)."""

    def __init__(self, cfg):
        self.domain = (cfg.windows_domain or "FINALIZE").upper()
        self.realms = {}
        for item in (cfg.windows_realms or "").split(","):
            if "=" in item:
                realm, dom = item.split("=", 1)
                self.realms[realm.strip().upper()] = dom.strip().upper()
        self.keytab = cfg.kerberos_keytab
        self.spn = cfg.kerberos_spn
        self.accounts = {}              # user lower -> (user as registered, password) in self.domain
        self.recent = collections.deque(maxlen=1000)
        self.lock = threading.Lock()
        if cfg.kerberos_max_skew:
            # the domain's "Maximum tolerance for computer clock synchronization" (MIT: clockskew); a profile
            # file ahead of KRB5_CONFIG's (MIT reads a colon-separated list, the first file wins)
            fd, path = tempfile.mkstemp(prefix="mssql-sim-krb5-", suffix=".conf")
            os.write(fd, b"[libdefaults]\n clockskew = %d\n" % int(cfg.kerberos_max_skew))
            os.close(fd)
            os.environ["KRB5_CONFIG"] = path + ":" + os.environ.get("KRB5_CONFIG", "/etc/krb5.conf")

    def trusted(self, domain):
        """Is ``domain`` (NetBIOS name) the simulator's own or one a realm maps to?"""
        d = (domain or "").upper()
        return d == self.domain or d in self.realms.values()

    def add_account(self, name, password):
        """Register DOMAIN\\user (or user) with its password for NTLM -> the canonical name."""
        dom, _, user = name.rpartition("\\")
        if dom and dom.upper() != self.domain:
            raise SqlError(50000, "The simulator is the domain controller of %s only, not of %s." % (self.domain, dom),
                           16, 1)
        with self.lock:
            self.accounts[user.lower()] = (user, password)
        return "%s\\%s" % (self.domain, user)

    def record(self, session, scheme, name, principal, error):
        """One login attempt for ``sim.logins``."""
        with self.lock:
            self.recent.append((time.time(), session.spid, scheme, name, principal, error))

    # --- the handshake ---------------------------------------------------------------------

    def handshake(self, session, blob):
        """Run the SSPI exchange of a LOGIN7 blob -> (scheme, windows name, principal, token to send with the
        login response or b"").  Raises SqlError 18452 when the exchange fails."""
        if blob.startswith(NTLMSSP):
            return self.ntlm(session, blob)
        if blob[:1] == b"\x60" or blob[:1] == b"\xa0":
            return self.kerberos(session, blob)
        raise untrusted("unknown SSPI package (blob starts %s)" % blob[:8].hex())

    def next_token(self, session, token):
        """Send ``token`` in an SSPI token (0xED) as the whole response and read the client's next one, an SSPI
        message (packet type 0x11)."""
        from . import packets as PK
        from . import tokens as K
        session.channel.send_message(K.sspi(token))
        typ, _status, data = session.channel.read_message()
        if typ != PK.SSPI:
            raise untrusted("expected an SSPI message (0x11), got packet type 0x%02x" % typ)
        return data

    # Kerberos ------------------------------------------------------------------------------

    def kerberos(self, session, blob):
        """Accept an AP-REQ (raw krb5 or SPNEGO) with the service account's keytab.  An exchange that needs more
        rounds (SPNEGO negotiating its mechanism) continues with SSPI tokens and 0x11 messages, 5 rounds at most."""
        if not self.keytab:
            raise untrusted("Kerberos login but the server has no keytab (--kerberos-keytab)")
        try:
            import gssapi
        except ImportError:
            raise untrusted("python3-gssapi is not installed")
        spnego = SPNEGO_OID in blob[:20]
        try:
            name = gssapi.Name(self.spn, gssapi.NameType.kerberos_principal) if self.spn else None
            creds = gssapi.Credentials(name=name, usage="accept", store={"keytab": self.keytab})
            ctx = gssapi.SecurityContext(creds=creds, usage="accept")
            out = ctx.step(blob) or b""
            for _ in range(4):
                if ctx.complete:
                    break
                blob = self.next_token(session, out)
                out = ctx.step(blob) or b""
            if not ctx.complete:
                raise untrusted("the Kerberos exchange did not complete in 5 rounds")
            principal = str(ctx.initiator_name)
        except gssapi.exceptions.GSSError as e:
            raise untrusted("Kerberos: %s" % e.gen_message())
        user, _, realm = principal.partition("@")
        dom = self.realms.get(realm.upper())
        if dom is None or "/" in user:
            raise untrusted("principal %s: realm %s is not trusted (--windows-realms)" % (principal, realm), principal)
        log.info("Kerberos%s login of %s as %s\\%s", " (SPNEGO)" if spnego else "", principal, dom, user)
        return "KERBEROS", "%s\\%s" % (dom, user), principal, out

    # NTLM ----------------------------------------------------------------------------------

    def ntlm(self, session, negotiate):
        """NEGOTIATE -> CHALLENGE (SSPI token, its own message) -> AUTHENTICATE (packet 0x11), verified."""
        if len(negotiate) < 16 or struct.unpack("<I", negotiate[8:12])[0] != 1:
            raise untrusted("NTLM: the LOGIN7 blob is not a NEGOTIATE_MESSAGE")
        asked = struct.unpack("<I", negotiate[12:16])[0]
        server_challenge = os.urandom(8)
        auth = self.next_token(session, self.challenge_message(asked, server_challenge))
        try:
            return self.verify(auth, server_challenge)
        except (ValueError, struct.error) as e:
            raise untrusted("NTLM: malformed AUTHENTICATE_MESSAGE (%s)" % e)

    def challenge_message(self, asked, server_challenge):
        """CHALLENGE_MESSAGE (MS-NLMP 2.2.1.2) of a domain controller's member server: target = the domain,
        TargetInfo with the NetBIOS/DNS names and MsvAvTimestamp (NTLMv2 clients need TargetInfo)."""
        flags = (UNICODE | REQUEST_TARGET | NTLM_FLAG | ALWAYS_SIGN | TARGET_TYPE_DOMAIN | TARGET_INFO | VERSION
                 | (asked & (EXTENDED_SESSIONSECURITY | F128 | F56 | KEY_EXCH)))
        dom = self.domain.encode("utf-16-le")
        host = "MSSQLSIM".encode("utf-16-le")
        dns = (self.domain.lower() + ".test").encode("utf-16-le")
        filetime = int((time.time() + 11644473600) * 10_000_000)
        info = _av_pairs([(2, dom), (1, host), (4, dns), (3, "mssqlsim.".encode("utf-16-le") + dns),
                          (7, struct.pack("<Q", filetime))])
        head = 56
        return (NTLMSSP + struct.pack("<I", 2) + struct.pack("<HHI", len(dom), len(dom), head)
                + struct.pack("<I", flags) + server_challenge + b"\x00" * 8
                + struct.pack("<HHI", len(info), len(info), head + len(dom))
                + bytes([10, 0]) + struct.pack("<H", 17763) + b"\x00\x00\x00\x0f" + dom + info)

    def verify(self, msg, server_challenge):
        """AUTHENTICATE_MESSAGE (MS-NLMP 2.2.1.3) -> the login; NTLMv2 only (3.3.2)."""
        if not msg.startswith(NTLMSSP) or struct.unpack("<I", msg[8:12])[0] != 3:
            raise ValueError("not an AUTHENTICATE_MESSAGE")
        flags = struct.unpack("<I", msg[60:64])[0]
        nt = _field(msg, 20)
        enc = "utf-16-le" if flags & UNICODE else "latin-1"
        domain = _field(msg, 28).decode(enc)
        user = _field(msg, 36).decode(enc)
        shown = "%s\\%s" % (domain, user)
        if not user:
            raise untrusted("NTLM: anonymous logon", shown)
        if len(nt) <= 24:
            # an LM/NTLMv1 (or NTLM2 session) response: refused at LmCompatibilityLevel 5
            raise untrusted("NTLM: %s sent an NTLMv1 response; the domain accepts NTLMv2 only" % shown, shown)
        if domain.upper() != self.domain:
            raise untrusted("NTLM: domain %r is not trusted" % domain, shown)
        with self.lock:
            account = self.accounts.get(user.lower())
        if account is None:
            raise untrusted("NTLM: no account %s in domain %s" % (user, self.domain), shown)
        proof, temp = nt[:16], nt[16:]
        if temp[:2] != b"\x01\x01":
            raise untrusted("NTLM: %s: not an NTLMv2 client challenge" % shown, shown)
        key = ntowfv2(account[1], user, domain)
        if not hmac.compare_digest(hmac.new(key, server_challenge + temp, hashlib.md5).digest(), proof):
            raise untrusted("NTLM: wrong password for %s" % shown, shown)
        return "NTLM", "%s\\%s" % (self.domain, account[0]), shown, b""
