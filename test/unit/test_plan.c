/*
 * Unit tests of the pure logic of the worker: LSN arithmetic and parsing
 * (lsn.c) and range planning and judging (plan.c: what to read, and what a
 * read means for DDL, events, end times and losses; which consumers need a
 * query; where a commit-time table's read splits at its periods), without
 * PostgreSQL or a network.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "core/lsn.h"
#include "worker/plan.h"

#include "tap.h"

/* An LSN from its text (the tests only use valid ones). */
static Lsn
L(const char *text)
{
	Lsn			l;

	if (!lsn_parse(text, &l))
	{
		printf("Bail out! bad LSN in test: %s\n", text);
		exit(1);
	}
	return l;
}

static bool
lsn_eq(Lsn a, const char *text)
{
	char		buf[LSN_TEXT_LEN + 1];

	lsn_format(&a, buf);
	return strcmp(buf, text) == 0;
}

static void
test_lsn(void)
{
	Lsn			a,
				b;

	check(lsn_parse("0x0000002d00000e580003", &a) && lsn_eq(a, "0x0000002D00000E580003"),
		  "parse accepts lower case, format writes upper case");
	check(!lsn_parse("0x0000002D00000E58000", &a), "parse refuses 19 digits");
	check(!lsn_parse("0x0000002D00000E5800030", &a), "parse refuses 21 digits");
	check(!lsn_parse("0000002D00000E58000300", &a), "parse refuses a missing 0x");
	check(!lsn_parse("0x0000002D00000E58000G", &a), "parse refuses a non-hex digit");
	check(!lsn_parse(NULL, &a), "parse refuses NULL");

	a = L("0x000000000000000000FF");
	check(lsn_increment(&a, &b) && lsn_eq(b, "0x00000000000000000100"), "increment carries into the next byte");
	a = L("0x00FFFFFFFFFFFFFFFFFF");
	check(lsn_increment(&a, &b) && lsn_eq(b, "0x01000000000000000000"), "increment carries across all bytes");
	a = L("0xFFFFFFFFFFFFFFFFFFFF");
	check(!lsn_increment(&a, &b), "increment of the maximum fails");
	a = L("0x00000000000000000100");
	check(lsn_decrement(&a, &b) && lsn_eq(b, "0x000000000000000000FF"), "decrement borrows from the next byte");
	a = L("0x00000000000000000000");
	check(!lsn_decrement(&a, &b) && lsn_is_zero(&a), "decrement of zero fails; zero is zero");

	a = L("0x0000002D00000E580003");
	b = L("0x0000002D00000F000001");
	check(lsn_cmp(&a, &b) < 0 && lsn_cmp(&b, &a) > 0 && lsn_cmp(&a, &a) == 0, "compare is unsigned big-endian");
	a = L("0x80000000000000000000");
	b = L("0x7FFFFFFFFFFFFFFFFFFF");
	check(lsn_cmp(&a, &b) > 0, "compare treats the high bit as unsigned");

	/* (start, ...] loses rows iff start + 1 < min */
	a = L("0x00000000000000000100");
	b = L("0x00000000000000000101");
	check(!lsn_range_starts_below(&a, &b), "a range starting right below min LSN is complete");
	b = L("0x00000000000000000102");
	check(lsn_range_starts_below(&a, &b), "a range whose first LSN is below min LSN may have lost rows");
	b = L("0x00000000000000000050");
	check(!lsn_range_starts_below(&a, &b), "a range above min LSN is complete");
}

/* What pipelines report: finalize's form and Debezium's, nothing else. */
static void
test_lsn_parse_any(void)
{
	Lsn			a;

	a = L("0x00000000000000000001");
	check(lsn_parse_any("0x0000002d00000f2a0002", &a) && lsn_eq(a, "0x0000002D00000F2A0002"),
		  "parse_any accepts finalize's 0x form");
	check(lsn_parse_any("0000002d:00000f2a:0002", &a) && lsn_eq(a, "0x0000002D00000F2A0002"),
		  "parse_any reads Debezium's 8:8:4 form as the same 10 bytes");
	check(lsn_parse_any("0000002D:00000F2A:0002", &a) && lsn_eq(a, "0x0000002D00000F2A0002"),
		  "parse_any reads Debezium's form in upper case too");
	check(lsn_parse_any("ffffffff:ffffffff:ffff", &a) && lsn_eq(a, "0xFFFFFFFFFFFFFFFFFFFF"),
		  "parse_any reads the largest Debezium LSN");
	a = L("0x00000000000000000001");
	check(!lsn_parse_any("2d:f2a:2", &a) && lsn_eq(a, "0x00000000000000000001"),
		  "parse_any refuses unpadded groups and leaves the LSN alone");
	check(!lsn_parse_any("0000002d:00000f2a:00002", &a), "parse_any refuses a 5-digit last group");
	check(!lsn_parse_any("0000002d:0000f2a:00002", &a), "parse_any refuses groups of 8, 7, 5 digits");
	check(!lsn_parse_any("0000002d-00000f2a-0002", &a), "parse_any refuses other separators");
	check(!lsn_parse_any("0000002d:00000f2a:000g", &a), "parse_any refuses a non-hex digit in a group");
	check(!lsn_parse_any(" 0000002d:00000f2a:002", &a), "parse_any refuses a leading space");
	check(!lsn_parse_any("0000002d:00000f2a:0002 ", &a), "parse_any refuses a trailing space");
	check(!lsn_parse_any("0x0000002d00000f2a0002 ", &a), "parse_any refuses a 0x form with a space");
	check(!lsn_parse_any("+000002d:00000f2a:0002", &a), "parse_any refuses a sign");
	check(!lsn_parse_any("0000002d00000f2a0002", &a), "parse_any refuses bare hex without 0x");
	check(!lsn_parse_any("", &a) && !lsn_parse_any(NULL, &a), "parse_any refuses empty and NULL");
}

/*
 * Which consumers need a query: one per report, none at max LSN, and none
 * beyond it: such a report is pending, never resolved to max LSN (that
 * would let the verdict follow the source without the pipeline).
 */
static void
test_plan_consumer(void)
{
	Lsn			max = L("0x00000000000000000500");
	Lsn			reported;
	Lsn			resolved;
	Lsn			target;

	reported = L("0x00000000000000000300");
	check(plan_consumer(&reported, NULL, &max, &target) == CONSUMER_LOOKUP &&
		  lsn_eq(target, "0x00000000000000000300"),
		  "a report below max LSN is looked up for itself");
	resolved = reported;
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_NOTHING,
		  "a report already resolved is not looked up again");
	resolved = L("0x00000000000000000200");
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_LOOKUP,
		  "a newer report is looked up");
	reported = max;
	check(plan_consumer(&reported, NULL, &max, &target) == CONSUMER_AT_MAX &&
		  lsn_eq(target, "0x00000000000000000500"),
		  "a report at max LSN takes max LSN's commit time");
	resolved = max;
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_NOTHING,
		  "a report at max LSN is resolved once");
	reported = L("0x00000000000000000900");
	resolved = L("0x00000000000000000300");
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_AHEAD &&
		  lsn_eq(target, "0x00000000000000000900"),
		  "a report beyond max LSN is pending, for itself");
	reported = L("0xFFFFFFFFFFFFFFFFFFFF");
	check(plan_consumer(&reported, NULL, &max, &target) == CONSUMER_AHEAD,
		  "the greatest LSN is pending too, never capped at max LSN");
	reported = L("0x00000000000000000900");
	max = L("0x00000000000000000700");
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_AHEAD,
		  "it stays pending while max LSN is below it");
	max = L("0x00000000000000000A00");
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_LOOKUP &&
		  lsn_eq(target, "0x00000000000000000900"),
		  "once max LSN passes a pending report, the report itself is looked up");
	resolved = reported;
	check(plan_consumer(&reported, &resolved, &max, &target) == CONSUMER_NOTHING,
		  "and then it is done");
}

static void
test_plan(void)
{
	CaptureInstance cis[3];
	TrackedSource t;
	TablePlan	p;
	Lsn			max = L("0x00000000000000000500");

	memset(cis, 0, sizeof(cis));
	cis[0] = (CaptureInstance) {"dbo_orders", "dbo", "orders", true, L("0x00000000000000000010"), 101};
	cis[1] = (CaptureInstance) {"dbo_orders_v2", "DBO", "Orders", true, L("0x00000000000000000300"), 101};
	cis[2] = (CaptureInstance) {"dbo_lines", "dbo", "lines", false, L("0x00000000000000000000"), 102};
	memset(&t, 0, sizeof(t));
	t.source_schema = "dbo";
	t.source_name = "orders";

	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_NO_INSTANCE,
		  "a table SQL Server did not resolve to an object id has no instance, whatever the names say");

	t.object_id = 101;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_BASELINE && p.instance == &cis[1],
		  "a new table starts at max LSN on the newest instance of its object id");

	{
		/* A case-sensitive database: dbo.Orders is another table than dbo.orders. */
		CaptureInstance cs[2];

		cs[0] = (CaptureInstance) {"dbo_Orders", "dbo", "Orders", true, L("0x00000000000000000300"), 201};
		cs[1] = (CaptureInstance) {"dbo_orders", "dbo", "orders", true, L("0x00000000000000000010"), 101};
		plan_table(&t, cs, 2, &max, &p);
		check(p.action == PLAN_BASELINE && p.instance == &cs[1],
			  "instances are matched by the object id SQL Server resolved, not by names compared in C");
	}

	/* A table renamed into the tracked name: its instance captures another object. */
	t.capture_instance = "dbo_orders";
	t.has_offset = true;
	t.offset = L("0x00000000000000000200");
	t.object_id = 999;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_SOURCE_REPLACED && p.instance == &cis[0],
		  "the followed instance capturing another object than the name resolves to stops the table");
	t.object_id = 0;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_NO_INSTANCE, "a name that no longer resolves has no instance");
	t.object_id = 101;
	t.capture_instance = NULL;
	t.has_offset = false;

	t.start_at_capture = true;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && p.nsegments == 1 && lsn_eq(p.seg[0].start, "0x000000000000000002FF"),
		  "start_from capture_start reads from just before the instance's start LSN");
	t.start_at_capture = false;

	/* start_from an LSN (where a lake's copy ends): (lsn, max] on the newest instance. */
	t.has_start_lsn = true;
	t.start_lsn = L("0x00000000000000000340");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && p.nsegments == 1 && p.instance == &cis[1] &&
		  lsn_eq(p.seg[0].start, "0x00000000000000000340") && lsn_eq(p.seg[0].end, "0x00000000000000000500"),
		  "start_from an LSN reads from right after it to max LSN");
	t.start_lsn = L("0x00000000000000000300");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && lsn_eq(p.seg[0].start, "0x00000000000000000300"),
		  "start_from the instance's start LSN itself is readable");
	t.start_lsn = L("0x000000000000000002FF");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && lsn_eq(p.seg[0].start, "0x000000000000000002FF"),
		  "start_from just before the instance's start LSN is readable (as capture_start reads)");
	t.start_lsn = L("0x000000000000000002FE");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_START_UNREADABLE,
		  "start_from further below the newest instance's start LSN reads nothing (changes after it may be cleaned up)");
	t.start_lsn = L("0x00000000000000000501");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_START_UNREADABLE, "start_from beyond max LSN reads nothing");
	t.start_lsn = max;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_BASELINE, "start_from max LSN itself is a baseline at max LSN");
	t.has_start_lsn = false;

	/* Only the old instance: read (offset, max] on it. */
	t.capture_instance = "dbo_orders";
	t.has_offset = true;
	t.offset = L("0x00000000000000000200");
	plan_table(&t, cis, 1, &max, &p);
	check(p.action == PLAN_READ && p.nsegments == 1 && p.seg[0].instance == &cis[0] &&
		  lsn_eq(p.seg[0].start, "0x00000000000000000200") && lsn_eq(p.seg[0].end, "0x00000000000000000500"),
		  "a tracked table keeps its instance and reads (offset, max]");

	/* A newer instance: the old one up to its start, the new one after. */
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && p.nsegments == 2 &&
		  p.seg[0].instance == &cis[0] && lsn_eq(p.seg[0].end, "0x000000000000000002FF") && !p.switch_in_seg[0] &&
		  p.seg[1].instance == &cis[1] && lsn_eq(p.seg[1].start, "0x000000000000000002FF") &&
		  lsn_eq(p.seg[1].end, "0x00000000000000000500") && p.switch_in_seg[1] && p.instance == &cis[1],
		  "a newer instance is followed from its start LSN, the old one read up to it");

	t.offset = L("0x000000000000000002FF");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_READ && p.nsegments == 1 && p.seg[0].instance == &cis[1] && p.switch_in_seg[0],
		  "read up to the switch already: go on with the new instance");

	{
		Lsn			low_max = L("0x00000000000000000280");

		t.offset = L("0x00000000000000000200");
		plan_table(&t, cis, 3, &low_max, &p);
		check(p.action == PLAN_READ && p.nsegments == 1 && p.seg[0].instance == &cis[0] && p.instance == &cis[0],
			  "a newer instance starting beyond max LSN does not switch yet");
	}

	/* The old instance dropped before its part was read: a gap. */
	plan_table(&t, &cis[1], 2, &max, &p);
	check(p.action == PLAN_INSTANCE_GAP && p.instance == &cis[1] && lsn_eq(p.gap_end, "0x000000000000000002FF"),
		  "an old instance dropped before the switch leaves a gap (data loss)");
	t.offset = L("0x00000000000000000400");
	plan_table(&t, &cis[1], 2, &max, &p);
	check(p.action == PLAN_READ && p.seg[0].instance == &cis[1] && p.switch_in_seg[0],
		  "an old instance dropped after the switch point: no gap");

	t.offset = max;
	t.capture_instance = "dbo_orders_v2";
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_NOTHING, "nothing to read at max LSN");

	t.offset = L("0x00000000000000000600");
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_LSN_REGRESSED, "an offset beyond max LSN is reported, not read");

	t.capture_instance = "dbo_gone";
	t.offset = L("0x00000000000000000400");
	plan_table(&t, cis, 0, &max, &p);
	check(p.action == PLAN_NO_INSTANCE, "no instance at all is reported");

	t.resuming = true;
	t.capture_instance = "dbo_orders";
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_RESUME && p.instance == &cis[0], "a resuming table reads its instance's min LSN");
	t.resuming = false;

	t.capture_instance = NULL;
	t.has_offset = false;
	t.source_name = "lines";
	t.object_id = 102;
	plan_table(&t, cis, 3, &max, &p);
	check(p.action == PLAN_NO_INSTANCE, "an instance capture has not started is not used");

	{
		Lsn			start = L("0x00000000000000000100");
		Lsn			zero = L("0x00000000000000000000");
		Lsn			min_ok = L("0x00000000000000000101");
		Lsn			min_lost = L("0x00000000000000000200");

		check(judge_range(&start, &zero) == RANGE_UNREADABLE, "min LSN 0 makes the range unreadable");
		check(judge_range(&start, &min_ok) == RANGE_COMPLETE, "min LSN at the range's first LSN: complete");
		check(judge_range(&start, &min_lost) == RANGE_MAY_HAVE_LOST_ROWS, "min LSN inside the range: data loss");
	}
}

/* The rules judge.c applies to what was read. */
static void
test_judge_rules(void)
{
	CaptureInstance cis[2];
	TrackedSource t;
	TablePlan	p;
	Lsn			max = L("0x00000000000000000500");
	Lsn			ddl;
	TimestampTz max_instant = 1000 * USECS_PER_SEC;
	TimestampTz row_time = 900 * USECS_PER_SEC;

	memset(cis, 0, sizeof(cis));
	cis[0] = (CaptureInstance) {"dbo_orders", "dbo", "orders", true, L("0x00000000000000000010"), 101};
	cis[1] = (CaptureInstance) {"dbo_orders_v2", "dbo", "orders", true, L("0x00000000000000000300"), 101};
	memset(&t, 0, sizeof(t));
	t.object_id = 101;
	t.capture_instance = "dbo_orders";
	t.has_offset = true;
	t.offset = L("0x00000000000000000200");
	t.offset_time = 800 * USECS_PER_SEC;

	/* One segment on the followed instance. */
	plan_table(&t, cis, 1, &max, &p);
	ddl = L("0x00000000000000000200");
	check(!plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL at the range's exclusive start is not in it");
	ddl = L("0x00000000000000000201");
	check(plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL just after the start is in the range");
	ddl = L("0x00000000000000000500");
	check(plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL at max LSN (the inclusive end) is in the range");
	ddl = L("0x00000000000000000501");
	check(!plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL after max LSN waits for the next cycle");
	t.has_schema_ack = true;
	t.schema_ack = L("0x00000000000000000300");
	ddl = L("0x00000000000000000300");
	check(!plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL at or below the acknowledged LSN was reviewed");
	ddl = L("0x00000000000000000301");
	check(plan_ddl_in_range(&t, &p.seg[0], &ddl), "DDL above the acknowledged LSN is new");
	t.has_schema_ack = false;

	check(!plan_ddl_blocks(&t, 3), "ddl_policy record: DDL never blocks");
	t.ddl_block = true;
	check(plan_ddl_blocks(&t, 1) && !plan_ddl_blocks(&t, 0), "ddl_policy block: any unreviewed DDL blocks");
	t.ddl_block = false;

	check(plan_segment_event(&p, 0, false) == SEGMENT_NO_EVENT, "a plain segment carries no event");
	check(plan_segment_event(&p, 0, true) == SEGMENT_SCHEMA_CHANGE, "DDL seen is a schema change on the segment");
	check(plan_segment_end_time(&p, 0, &t, true, row_time, max_instant) == max_instant,
		  "the last segment ends at max LSN's commit time");

	/* Two segments across an instance switch. */
	plan_table(&t, cis, 2, &max, &p);
	check(p.nsegments == 2, "(a switch plan has two segments)");
	check(plan_segment_event(&p, 0, true) == SEGMENT_NO_EVENT,
		  "DDL is not reported on the segment before the switch");
	check(plan_segment_event(&p, 1, true) == SEGMENT_INSTANCE_SWITCH &&
		  plan_segment_event(&p, 1, false) == SEGMENT_INSTANCE_SWITCH,
		  "the segment that starts the newer instance carries the switch (with any DDL)");
	check(plan_segment_end_time(&p, 0, &t, true, row_time, max_instant) == row_time,
		  "a segment ending at the switch ends at its last row's commit time");
	check(plan_segment_end_time(&p, 0, &t, false, 0, max_instant) == t.offset_time,
		  "an empty segment ending at the switch ends at the offset's commit time");
	t.offset_time = 0;
	check(plan_segment_end_time(&p, 0, &t, false, 0, max_instant) == max_instant,
		  "without an offset time, at max LSN's commit time");
	check(plan_segment_end_time(&p, 0, &t, true, max_instant + 1, max_instant) == max_instant,
		  "a segment never ends after max LSN's commit time");
	check(plan_segment_end_time(&p, 1, &t, true, row_time, max_instant) == max_instant,
		  "the switch segment, being last, ends at max LSN's commit time");

	/* Automatic resume after a loss. */
	{
		TimestampTz now = 100000 * USECS_PER_SEC;
		int64		window = 3600 * USECS_PER_SEC;

		check(!plan_loss_resumes(&t, now, window), "on_data_loss stop: a loss never resumes by itself");
		t.auto_resume = true;
		check(plan_loss_resumes(&t, now, window), "on_data_loss resume: the first loss resumes");
		t.has_last_loss = true;
		t.last_loss = now - window + 1;
		check(!plan_loss_resumes(&t, now, window), "a second loss within the window waits for a person");
		t.last_loss = now - window;
		check(plan_loss_resumes(&t, now, window), "a loss a whole window after the previous one resumes");
		t.last_loss = PG_INT64_MIN;
		check(!plan_loss_resumes(&t, PG_INT64_MAX, window), "an overflowing age counts as recent");
	}
}

/*
 * Whether a DDL statement names the event column (plan_ddl_mentions):
 * case-insensitively, as a whole identifier, bare, [bracketed] or "quoted".
 */
static void
test_ddl_mentions(void)
{
	check(plan_ddl_mentions("ALTER TABLE dbo.orders ALTER COLUMN created_at datetime2(3)", "created_at"),
		  "ddl_mentions: a bare column name in an ALTER COLUMN");
	check(plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN CREATED_AT", "created_at") &&
		  plan_ddl_mentions("alter table dbo.orders drop column created_at", "Created_At"),
		  "ddl_mentions: case-insensitive both ways");
	check(plan_ddl_mentions("ALTER TABLE [dbo].[orders] DROP COLUMN [created_at];", "created_at"),
		  "ddl_mentions: a [bracketed] name");
	check(plan_ddl_mentions("ALTER TABLE \"dbo\".\"orders\" ALTER COLUMN \"Created_At\" date", "created_at"),
		  "ddl_mentions: a \"quoted\" name");
	check(plan_ddl_mentions("created_at", "created_at"), "ddl_mentions: the whole command is the name");
	check(plan_ddl_mentions("created_at datetime2 NOT NULL", "created_at"),
		  "ddl_mentions: a name at the start of the command");
	check(plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN created_at", "created_at"),
		  "ddl_mentions: a name at the end of the command");
	check(plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN a,created_at,b", "created_at") &&
		  plan_ddl_mentions("EXEC sp_rename 'dbo.orders.created_at', 'made_at', 'COLUMN'", "created_at") &&
		  plan_ddl_mentions("ALTER TABLE dbo.orders ALTER COLUMN created_at\tdatetime\n", "created_at") &&
		  plan_ddl_mentions("ALTER TABLE o ADD CONSTRAINT c CHECK(created_at>'2020')", "created_at"),
		  "ddl_mentions: punctuation, quotes, a dot and white space delimit an identifier");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders ADD created_at2 datetime", "created_at"),
		  "ddl_mentions: a longer name with the column as prefix (created_at2) is not it");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders ADD created_at_utc datetime", "created_at"),
		  "ddl_mentions: created_at_utc is not created_at");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN my_created_at", "created_at"),
		  "ddl_mentions: a longer name with the column as suffix (my_created_at) is not it");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN [my_created_at2]", "created_at"),
		  "ddl_mentions: a bracketed longer name containing the column is not it");
	check(!plan_ddl_mentions("DECLARE @created_at datetime; SELECT #created_at, created_at$", "created_at"),
		  "ddl_mentions: @, # and $ are identifier characters, not delimiters");
	check(!plan_ddl_mentions("ALTER TABLE o DROP COLUMN \xc3\xa9" "created_at", "created_at"),
		  "ddl_mentions: a non-ASCII letter next to the name makes another identifier");
	check(plan_ddl_mentions("ALTER TABLE o ADD created_at2 int; ALTER TABLE o DROP COLUMN created_at", "created_at"),
		  "ddl_mentions: a whole mention after a non-matching prefix is still found");
	check(plan_ddl_mentions("ALTER TABLE o ADD my_created_at int, [created_at] int", "created_at"),
		  "ddl_mentions: a whole mention after a non-matching suffix is still found");
	check(!plan_ddl_mentions("ALTER TABLE o DROP COLUMN created_a", "created_at"),
		  "ddl_mentions: a truncated name at the end of the command is not it");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders ADD note nvarchar(10)", "created_at") &&
		  !plan_ddl_mentions("", "created_at"),
		  "ddl_mentions: a command without the name, or empty, does not mention it");
	check(!plan_ddl_mentions("ALTER TABLE dbo.orders DROP COLUMN created_at", "") &&
		  !plan_ddl_mentions("", ""),
		  "ddl_mentions: an empty column name never matches");
	check(plan_ddl_mentions("ALTER TABLE o ALTER COLUMN [order date] date", "order date"),
		  "ddl_mentions: a bracketed name with a space");
}

/*
 * The split points of a read: the period boundaries in (after, until], in
 * the server's wall time, at most max; none for an empty span.
 */
static void
test_period_splits(void)
{
	Interval	hour = {.time = USECS_PER_HOUR};
	Interval	month = {.month = 1};
	PeriodSpec	hours;
	PeriodSpec	months;
	Timestamp	out[8];
	TimestampTz t0930 = 9 * USECS_PER_HOUR + 30 * USECS_PER_MINUTE;	/* 2000-01-01 09:30 UTC */
	int			n;

	check(period_spec_make(&hour, NULL, true, &hours) == GRANULARITY_OK &&
		  period_spec_make(&month, NULL, true, &months) == GRANULARITY_OK, "hour and month specs");
	n = plan_period_splits(&hours, t0930, 12 * USECS_PER_HOUR, 0, out, 8);
	check(n == 3 && out[0] == 10 * USECS_PER_HOUR && out[1] == 11 * USECS_PER_HOUR && out[2] == 12 * USECS_PER_HOUR,
		  "09:30 to 12:00: 10:00, 11:00 and 12:00 (a boundary at the end is one)");
	n = plan_period_splits(&hours, t0930, 12 * USECS_PER_HOUR, 3600, out, 8);
	check(n == 3 && out[0] == 11 * USECS_PER_HOUR, "a server an hour east sees 10:00 UTC as 11:00");
	check(plan_period_splits(&hours, 10 * USECS_PER_HOUR, 10 * USECS_PER_HOUR + 59 * USECS_PER_MINUTE, 0, out, 8) == 0,
		  "a span inside one hour has none");
	check(plan_period_splits(&hours, 10 * USECS_PER_HOUR, 10 * USECS_PER_HOUR, 0, out, 8) == 0 &&
		  plan_period_splits(&hours, 11 * USECS_PER_HOUR, 10 * USECS_PER_HOUR, 0, out, 8) == 0,
		  "an empty or backward span has none");
	check(plan_period_splits(&hours, 0, 100 * USECS_PER_HOUR, 0, out, 8) == 8 && out[7] == 8 * USECS_PER_HOUR,
		  "at most max, the first ones");
	n = plan_period_splits(&months, 20 * USECS_PER_DAY, 70 * USECS_PER_DAY, 0, out, 8);
	check(n == 2 && out[0] == 31 * USECS_PER_DAY && out[1] == 60 * USECS_PER_DAY,
		  "calendar months: February 1 and March 1 of 2000 (a leap year)");
}

int
main(void)
{
	test_period_splits();
	test_lsn();
	test_lsn_parse_any();
	test_plan_consumer();
	test_plan();
	test_judge_rules();
	test_ddl_mentions();
	return tap_done();
}
