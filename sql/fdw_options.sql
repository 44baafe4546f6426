-- Sources as foreign servers of finalize_mssql: every option is validated.
\i sql/include/preamble.sql

CREATE SERVER src_ok FOREIGN DATA WRAPPER finalize_mssql
    OPTIONS (host 'sql1.example.com', port '1433', database 'erp', timezone 'Europe/Berlin', tds_version '7.4');
CREATE USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (username 'cdc_reader', password 's3cr3t!');
SELECT srvname, srvoptions FROM pg_foreign_server WHERE srvname = 'src_ok';

-- Options may be added and changed later, and are checked then too.
ALTER SERVER src_ok OPTIONS (SET port '14330');
ALTER SERVER src_ok OPTIONS (SET port '0');
ALTER SERVER src_ok OPTIONS (SET port '65536');
ALTER SERVER src_ok OPTIONS (SET port '14x');
ALTER SERVER src_ok OPTIONS (SET timezone 'Mars/Olympus_Mons');
ALTER SERVER src_ok OPTIONS (SET timezone '');
ALTER SERVER src_ok OPTIONS (SET timezone 'America/New_York');
ALTER SERVER src_ok OPTIONS (SET tds_version '8.0');
ALTER SERVER src_ok OPTIONS (SET host 'sql1:1433');
ALTER SERVER src_ok OPTIONS (SET host 'sql1\INST');
ALTER SERVER src_ok OPTIONS (SET host '');
ALTER SERVER src_ok OPTIONS (SET database '');
SELECT repeat('d', 129) AS long_name \gset
ALTER SERVER src_ok OPTIONS (SET database :'long_name');

ALTER SERVER src_ok OPTIONS (ADD capture_stall_threshold '20 minutes');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '0');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '1 month');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold 'soon');
-- Lengths that overflow 64 bits of microseconds (they used to wrap around).
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '300000000 days');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '100000000 days 2562047788 hours');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '106751991 days');
ALTER SERVER src_ok OPTIONS (SET capture_stall_threshold '20 minutes');

-- How far SQL Server's clock may be stepped back: 0 to 1 hour, without months.
ALTER SERVER src_ok OPTIONS (ADD clock_tolerance '90 s');
SELECT finalize_internal.clock_tolerance('src_ok'), finalize_internal.clock_tolerance('no_such_server');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance '0');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance '1 hour');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance '1 hour 1 second');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance '-1 s');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance '1 month');
ALTER SERVER src_ok OPTIONS (SET clock_tolerance 'a minute');
ALTER SERVER src_ok OPTIONS (DROP clock_tolerance);
SELECT finalize_internal.clock_tolerance('src_ok');

-- Encryption: off, request or require (the default), the certificate
-- verified unless trust_server_certificate; ca_file an absolute path that
-- FreeTDS's configuration can carry; host_name_in_certificate only the host
-- (FreeTDS 1.3 checks no other name). Hosts that would break FreeTDS's
-- configuration file are refused too.
ALTER SERVER src_ok OPTIONS (ADD encrypt 'require', ADD trust_server_certificate 'false',
                             ADD ca_file '/etc/ssl/certs/ca-certificates.crt');
ALTER SERVER src_ok OPTIONS (SET encrypt 'yes');
ALTER SERVER src_ok OPTIONS (SET encrypt 'strict');
ALTER SERVER src_ok OPTIONS (SET trust_server_certificate 'maybe');
ALTER SERVER src_ok OPTIONS (SET ca_file 'certs/ca.pem');
ALTER SERVER src_ok OPTIONS (SET ca_file '/etc/ssl/ca.pem;encryption = off');
-- a device or a FIFO would hang or exhaust the TLS library that reads it
ALTER SERVER src_ok OPTIONS (SET ca_file '/dev/zero');
ALTER SERVER src_ok OPTIONS (SET host 'sql1.example.com#x');
ALTER SERVER src_ok OPTIONS (SET host E'sql1\nencryption = off');
ALTER SERVER src_ok OPTIONS (ADD host_name_in_certificate 'sql1.internal.example.com');
ALTER SERVER src_ok OPTIONS (ADD host_name_in_certificate 'SQL1.example.com');
ALTER SERVER src_ok OPTIONS (DROP host_name_in_certificate, SET encrypt 'off', DROP ca_file);

-- Unknown options list the valid ones.
ALTER SERVER src_ok OPTIONS (ADD hostname 'x');
CREATE SERVER src_bad FOREIGN DATA WRAPPER finalize_mssql OPTIONS (dbname 'erp');

-- Credentials belong in user mappings, and their values are never echoed.
CREATE SERVER src_bad FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', password 'hunter2');
CREATE SERVER src_bad FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', username 'sa');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (SET password '');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (ADD host 'h');
-- A Windows login is DOMAIN\user (for authentication 'ntlm'), nothing looser.
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (SET username 'CORP\');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (SET username '\svc_cdc');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (SET username 'CORP\svc\cdc');
-- Kerberos: the principal and its keytab (a secret: base64 of a keytab,
-- never echoed) in the user mapping; how to log in and the SPN on the server.
ALTER SERVER src_ok OPTIONS (ADD authentication 'negotiate');
ALTER SERVER src_ok OPTIONS (ADD server_spn 'MSSQLSvc/sql1 .example.com:1433');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (ADD principal 'svc finalize@CORP.EXAMPLE.COM');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (ADD keytab 'c2VjcmV0LWtleXRhYi1ieXRlcw==');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (ADD keytab 'not base64 at all');
CREATE SERVER src_bad FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', keytab 'BQI=');
ALTER USER MAPPING FOR CURRENT_USER SERVER src_ok OPTIONS (ADD secret 'x');

-- The wrapper itself takes no options.
ALTER FOREIGN DATA WRAPPER finalize_mssql OPTIONS (ADD host 'h');

-- Nothing was changed by the failed statements.
SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'src_ok';
SELECT umoptions FROM pg_user_mappings WHERE srvname = 'src_ok';

-- A Kerberos source: accepted as written.
CREATE SERVER src_krb FOREIGN DATA WRAPPER finalize_mssql
    OPTIONS (host 'sql1.corp.example.com', database 'erp', authentication 'kerberos',
             server_spn 'MSSQLSvc/sql1.corp.example.com:1433@CORP.EXAMPLE.COM');
CREATE USER MAPPING FOR CURRENT_USER SERVER src_krb
    OPTIONS (principal 'svc_finalize@CORP.EXAMPLE.COM', keytab 'BQIAAAA=');
CREATE SERVER src_ntlm FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', authentication 'ntlm');
CREATE USER MAPPING FOR CURRENT_USER SERVER src_ntlm OPTIONS (username 'CORP\svc_cdc', password 'pw');
SELECT srvname, srvoptions FROM pg_foreign_server WHERE srvname IN ('src_krb', 'src_ntlm') ORDER BY 1;
DROP SERVER src_krb, src_ntlm CASCADE;

DROP USER MAPPING FOR CURRENT_USER SERVER src_ok;
DROP SERVER src_ok;
