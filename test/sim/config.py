"""Simulator settings (command line options map 1:1 onto these fields)."""
from dataclasses import dataclass


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 14330
    database: str = "demo"
    storage_dir: str = ""             # where the sqlite files go ('' = the system's temporary directory)
    extra_databases: str = ""         # more databases: NAME, PATTERN:COUNT, PATTERN:FIRST-LAST, comma separated
    login: str = "sa"
    password: str = "Passw0rd!"
    timezone: str = "UTC"
    clock: str = "real"               # real | sim
    start_time: str = ""              # sim clock start (UTC, ISO); default: now rounded to the second
    pollinginterval: float = 5.0      # capture job: seconds between cycles
    maxtrans: int = 500               # capture job: transactions per scan
    maxscans: int = 10                # capture job: scans per cycle
    retention: int = 4320             # cleanup job: minutes
    threshold: int = 5000             # cleanup job: rows per DELETE
    cleanup_time: str = "02:00"       # cleanup job: daily at this local time ('' = never)
    dummy_interval: float = 300.0     # seconds of mapping-table silence before a dummy row (0 = never)
    dummy_on_idle_log: bool = True    # also write dummy rows when the log had no activity at all
    map_absent: str = "null"          # fn_cdc_map_lsn_to_time of an absent LSN: null | next
    traffic: bool = False
    traffic_rate: float = 2.0         # transactions per second (average, Poisson)
    traffic_tables: str = "dbo.orders"
    lateness: str = "none"            # generated date/time values: none | exp:M | pareto:A:S | uniform:M [,neg:F]
    seed: int = 1
    version: str = "2019"             # 2019 | 2022 (only @@VERSION and LOGINACK differ)
    demo: bool = True                 # create dbo.orders with CDC enabled at start
    collation: str = "SQL_Latin1_General_CP1_CI_AS"   # database collation ("_CS_": case-sensitive names/strings)
    commit_time_offset: int = 0       # minutes added to the local clock in lsn_time_mapping/ddl_history times
    packet_size_max: int = 32767
    tls_cert: str = ""                # PEM certificate (chain) for TLS; '' = no certificate (ENCRYPT_NOT_SUP)
    tls_key: str = ""                 # its PEM private key ('' = in tls_cert)
    force_encryption: bool = False    # SQL Server's "Force Encryption": every connection fully encrypted
    windows_domain: str = "FINALIZE"  # NetBIOS name of the domain the simulator is a member (and the NTLM DC) of
    windows_realms: str = ""          # Kerberos realms trusted as domains: 'REALM=DOMAIN,...' (FINALIZE.TEST=FINALIZE)
    kerberos_keytab: str = ""         # the service account's keytab ('' = no Kerberos); read at each login
    kerberos_spn: str = ""            # accept only this SPN (MSSQLSvc/host:port); '' = any key of the keytab
    kerberos_max_skew: int = 0        # Kerberos clock tolerance in seconds (0 = krb5.conf's, 300 by default)
