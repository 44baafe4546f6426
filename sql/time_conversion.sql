-- SQL Server commit times are local datetimes: each becomes the earliest
-- instant it can denote, so the verdict can lag but never lead.
\i sql/include/preamble.sql

-- Europe/Berlin springs forward on 2026-03-29 at 01:00 UTC (02:00 -> 03:00):
-- local 02:xx does not exist and maps to the earlier of the two offsets.
SELECT l AS local_time, finalize.mssql_local_to_instant(l, 'Europe/Berlin') AS instant
  FROM unnest(ARRAY['2026-03-29 01:59:59.997', '2026-03-29 02:00:00', '2026-03-29 02:59:59.997',
                    '2026-03-29 03:00:00']::timestamp[]) AS l;
-- It falls back on 2026-10-25 at 01:00 UTC (03:00 -> 02:00): local 02:xx
-- happens twice and maps to the first time.
SELECT l AS local_time, finalize.mssql_local_to_instant(l, 'Europe/Berlin') AS instant
  FROM unnest(ARRAY['2026-10-25 01:59:59.997', '2026-10-25 02:00:00', '2026-10-25 02:30:00',
                    '2026-10-25 02:59:59.997', '2026-10-25 03:00:00']::timestamp[]) AS l;
-- Never later than PostgreSQL's own reading of the local time.
SELECT bool_and(finalize.mssql_local_to_instant(l, z) <= (l::text || ' ' || z)::timestamptz) AS never_later
  FROM generate_series('2026-01-01'::timestamp, '2027-01-01', '17 minutes') AS l,
       unnest(ARRAY['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kolkata', 'UTC']) AS z;
-- Zones without DST, half-hour DST (Lord Howe), microseconds kept.
SELECT finalize.mssql_local_to_instant('2026-11-29 12:00:00.123456', 'Asia/Kolkata') AS kolkata,
       finalize.mssql_local_to_instant('2026-04-05 01:45', 'Australia/Lord_Howe') AS lord_howe_twice,
       finalize.mssql_local_to_instant('2026-10-04 02:15', 'Australia/Lord_Howe') AS lord_howe_skipped,
       finalize.mssql_local_to_instant('1900-01-01 00:00', 'UTC') AS datetime_epoch;
SELECT finalize.mssql_local_to_instant('2026-11-29 12:00', 'Mars/Olympus_Mons');
-- At the ends of the timestamp range a local time can denote an instant out
-- of it: an error, never a wrapped or invalid value.
SELECT finalize.mssql_local_to_instant('294276-12-31 20:00', 'Pacific/Pago_Pago');
SELECT finalize.mssql_local_to_instant('4714-11-24 05:00 BC', 'Asia/Kamchatka');
SELECT finalize.mssql_local_to_instant('294276-12-31 20:00', 'Pacific/Kiritimati') IS NOT NULL AS in_range;
