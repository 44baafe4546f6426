# finalize: PGXS build.
#
#   make && make install            build and install into the server of pg_config
#   make installcheck               pg_regress in a temporary instance that preloads
#                                   the library (test/regress.conf); not as root
#   make installcheck USE_EXISTING=1
#                                   the same against a running server that preloads
#                                   it (PGHOST, PGPORT; PGUSER: any superuser)
#   make unitcheck                  build and run the C unit tests of the pure modules
#   make meta                       rewrite META.json's versions from the control file
#
# The version is written once, in finalize.control; everything else derives it.

PG_CONFIG ?= pg_config

EXTENSION  = finalize
EXTVERSION = $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" $(EXTENSION).control)

# One folder per subsystem, bottom layer first (src/README.md: which folder
# may include which): core, mssql, worker, sensor, store, gate, alert, lake;
# src/finalize.c holds only _PG_init.
MODULE_big = finalize
SUBSYSTEMS = core mssql worker sensor store gate alert lake publish push
OBJS       = src/finalize.o $(patsubst %.c,%.o,$(sort $(foreach d,$(SUBSYSTEMS),$(wildcard src/$(d)/*.c))))

# SQL: every object is written once (CONTRIBUTING.md, "Changing SQL").
#   src/sql/NN_*.once.sql   run by a fresh install only: schema, tables,
#                           types, indexes, foreign-data wrappers
#   src/sql/NN_*.sql        run by every install and every update: functions,
#                           views, triggers, grants (CREATE OR REPLACE)
#   src/sql/updates/A--B.sql       the hand-written step from A to B, run
#                                  first; A--B.post.sql (optional) last
#   src/sql/release/        released scripts, frozen byte for byte
# The install script of the current version is every part in name order
# (a part's .once.sql first); each update script to it is generated from
# its step, pre-update.sql, the rerunnable parts and post-update.sql, the
# way TimescaleDB generates its updates.
SQL_ONCE    = $(wildcard src/sql/*.once.sql)
SQL_RERUN   = $(sort $(filter-out %.once.sql,$(wildcard src/sql/*.sql)))
SQL_PARTS   = $(sort $(SQL_ONCE) $(SQL_RERUN))
SQL_STEPS   = $(filter-out %.post.sql,$(wildcard src/sql/updates/*--$(EXTVERSION).sql))
SQL_UPDATES = $(patsubst src/sql/updates/%.sql,$(EXTENSION)--%.sql,$(SQL_STEPS))
DATA_built  = $(EXTENSION)--$(EXTVERSION).sql $(SQL_UPDATES)
DATA        = $(filter-out $(addprefix src/sql/release/,$(DATA_built)),$(wildcard src/sql/release/$(EXTENSION)--*.sql))

# DB-Library with Microsoft semantics (INT_EXIT never calls exit()), libcurl
# for object stores, libxml2 for their XML answers, libavro (Apache Avro C)
# for Iceberg's manifests, and zlib, liblzma and snappy for their blocks'
# codecs (src/lake/avro_codec.c decompresses them, not libavro). Our
# headers' directory is given absolute: ccache (test/lib/common.sh) then
# finds an earlier build's headers from a copy elsewhere and skips the
# preprocessor (a relative -I hid them from its direct mode).
PG_CPPFLAGS = -DMSDBLIB -I$(abspath $(srcdir))/src $(shell xml2-config --cflags 2>/dev/null)
# The workers compare it with the catalog's version (pg_extension.extversion).
PG_CPPFLAGS += -DFINALIZE_VERSION='"$(EXTVERSION)"'
# The zone directory of a PostgreSQL built --with-system-tzdata (empty: its
# own), whose links core/zone_link.c reads.
FINALIZE_SYSTEM_TZDIR := $(shell $(PG_CONFIG) --configure | tr ' ' '\n' | sed -n "s/^'--with-system-tzdata=\(.*\)'$$/\1/p")
PG_CPPFLAGS += -DFINALIZE_SYSTEM_TZDIR='"$(FINALIZE_SYSTEM_TZDIR)"'
SHLIB_LINK  = -lsybdb -lgssapi_krb5 -lkrb5 -lgnutls -lcurl $(shell xml2-config --libs 2>/dev/null || echo -lxml2) -lavro -lz -llzma -lsnappy

# The library exports only what PostgreSQL looks up in it by name: _PG_init,
# Pg_magic_func, each SQL-callable function and its pg_finfo_ record, and
# the background workers' entry points (bgw_function_name, declared
# PGDLLEXPORT). 16+ compile with -fvisibility=hidden, but 15's PGDLLEXPORT
# is empty and every global function of ours (slot_claim, path_is_safe,
# ...) would be in the namespace of every backend that loads the library.
# The list is PGXS's SHLIB_EXPORTS (a linker version script on Linux),
# generated from the sources, so a new function cannot be left out of it.
SHLIB_EXPORTS = finalize_exports.txt

# Every object depends on the headers it includes (a struct that changes
# must rebuild every file that uses it).
PG_CPPFLAGS += -MMD -MP

# PostgreSQL's headers as system headers: their inline functions have
# unused parameters, ours may not (callbacks mark theirs pg_attribute_unused).
PG_CPPFLAGS += -isystem $(includedir_server) -isystem $(includedir_internal)

# Warnings are errors in this tree; `make FINALIZE_WERROR=` relaxes that for
# compilers newer than the ones we test with.
FINALIZE_WERROR ?= -Werror
PG_CFLAGS += -Wall -Wextra -Wno-missing-field-initializers \
             -Wno-sign-compare $(FINALIZE_WERROR)

# The user's guide (docs/*.md) is installed in a folder of its own,
# $(docdir)/extension/finalize/ (/usr/share/doc/postgresql-doc-15/extension/
# finalize on Debian): PGXS's DOCS would put README.md and friends straight
# into extension/, next to every other extension's.
FINALIZE_DOCS = $(sort $(wildcard docs/*.md))

# PostgreSQL's isolation tester (specs/*.spec, expected/<name>.out), run by
# make installcheck after the regression tests.
ISOLATION      = verdict_visibility verdict_rollback notify_commit gate_locks shard_locks
ISOLATION_OPTS = --inputdir=. --load-extension=plpgsql --encoding=UTF8 --outputdir=$(REGRESS_OUTPUTDIR)/output_iso \
                 $(if $(USE_EXISTING),,--temp-instance=$(REGRESS_TMP)/instance --temp-config=$(srcdir)/test/regress.conf \
                                       --bindir=$(REGRESS_TMP)/bin)

REGRESS      = setup fdw_options tracking write_path sensor_api facts time_conversion gate pipelines lake event_time alerts alert_delivery record_batch privileges sharded publish_airflow publish_dagster publish_success_marker
REGRESS_OPTS = --inputdir=. --load-extension=plpgsql --encoding=UTF8

# make installcheck runs pg_regress in a temporary instance it starts and
# stops itself (as pg_cron does): initdb'ed in tmp_check/instance by the
# user running make (initdb refuses root), with test/regress.conf appended to
# its postgresql.conf, loading the extension installed where pg_config points.
# USE_EXISTING=1 runs the tests against a running server instead.
# REGRESS_OUTPUTDIR=dir puts results/, regression.diffs, log/ and tmp_check/
# there, for a checkout the user cannot write to (test/run-tests uses it).
REGRESS_OUTPUTDIR ?= .
REGRESS_TMP        = $(REGRESS_OUTPUTDIR)/tmp_check
REGRESS_OPTS      += --outputdir=$(REGRESS_OUTPUTDIR)
ifeq ($(USE_EXISTING),)
REGRESS_OPTS += --temp-instance=$(REGRESS_TMP)/instance --temp-config=$(srcdir)/test/regress.conf \
                --bindir=$(REGRESS_TMP)/bin
REGRESS_PREP  = regress-bin
endif

EXTRA_CLEAN = $(DATA_built) results regression.diffs regression.out $(OBJS:.o=.d)

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The bitcode compile (.bc, for JIT) would rewrite each .d file with the .bc
# as its target, and a header change would then rebuild no .o: its
# dependency output goes nowhere.
BITCODE_CFLAGS += -MF /dev/null

-include $(OBJS:.o=.d)

# FINALIZE_VERSION comes from the control file: the files that compare it
# with the catalog's version are rebuilt when it changes.
src/worker/source_config.o src/gate/release_checks.o src/lake/lake_state.o src/core/library_version.o: $(EXTENSION).control

# src/sql itself too: renaming a part keeps its time but changes the folder's.
$(EXTENSION)--$(EXTVERSION).sql: $(SQL_PARTS) src/sql $(EXTENSION).control
	cat $(SQL_PARTS) > $@

# An update script: a banner, the step, the rerunnable parts, the step's
# post file if it has one. @update_to@ is the version it updates to.
$(EXTENSION)--%--$(EXTVERSION).sql: src/sql/updates/%--$(EXTVERSION).sql src/sql/updates/pre-update.sql \
		src/sql/updates/post-update.sql $(SQL_RERUN) src/sql src/sql/updates $(EXTENSION).control
	{ printf -- '-- finalize %s to %s, generated by make from src/sql/updates/%s--%s.sql and the\n' '$*' '$(EXTVERSION)' '$*' '$(EXTVERSION)'; \
	  printf -- '-- rerunnable parts of src/sql/ (CONTRIBUTING.md, "Changing SQL"). Do not edit.\n\n'; \
	  printf '\\echo Use "ALTER EXTENSION $(EXTENSION) UPDATE TO '"'"'%s'"'"'" to load this file. \\quit\n\n' '$(EXTVERSION)'; \
	  cat src/sql/updates/pre-update.sql $< $(SQL_RERUN); \
	  cat $(wildcard src/sql/updates/$*--$(EXTVERSION).post.sql) /dev/null; \
	  cat src/sql/updates/post-update.sql; \
	} | sed 's/@update_to@/$(EXTVERSION)/g' > $@

# The names of SHLIB_EXPORTS, one a line ("name 1", the format of PGXS's
# exports files): every PG_FUNCTION_INFO_V1 and PGDLLEXPORT declaration
# at the start of a line of src/ (test_packaging.py checks the library's
# dynamic symbols against them, the SQL and the workers' names).
FINALIZE_C_SOURCES = src/finalize.c $(sort $(foreach d,$(SUBSYSTEMS),$(wildcard src/$(d)/*.c src/$(d)/*.h)))
$(SHLIB_EXPORTS): $(FINALIZE_C_SOURCES) Makefile
	{ echo '# generated by the Makefile from the sources: what PostgreSQL looks up by name'; \
	  printf '%s 1\n' _PG_init Pg_magic_func; \
	  sed -n -e 's/^PG_FUNCTION_INFO_V1(\([A-Za-z0-9_]*\));.*/\1 1\npg_finfo_\1 1/p' \
	         -e 's/^PGDLLEXPORT [^(]*[ *]\([A-Za-z0-9_]*\)(.*/\1 1/p' $(FINALIZE_C_SOURCES) | sort -u; } >$@
EXTRA_CLEAN += $(SHLIB_EXPORTS) $(SHLIB_EXPORTS:%.txt=%.list)

# C unit tests (test/unit/test_*.c, TAP output): each links the pure modules
# it tests, with the server's headers and libpgport, no server needed.
UNIT_SOURCES_test_plan = src/worker/plan.c src/core/lsn.c src/core/period.c
UNIT_SOURCES_test_clock_check = src/worker/clock_check.c
UNIT_SOURCES_test_tds_conf = src/mssql/tds_conf.c
UNIT_SOURCES_test_sketch = src/core/sketch.c
UNIT_SOURCES_test_outcome = src/alert/outcome.c
UNIT_SOURCES_test_inventory_codec = src/gate/inventory_codec.c
UNIT_SOURCES_test_inventory_merge = src/gate/inventory_merge.c src/store/store_key.c
UNIT_SOURCES_test_period = src/core/period.c
UNIT_SOURCES_test_snapshots = src/lake/snapshots.c src/core/lsn.c
UNIT_SOURCES_test_delta_log = src/lake/delta_log.c src/lake/delta_commit.c src/core/lsn.c
UNIT_SOURCES_test_source_pick = src/core/source_pick.c
UNIT_SOURCES_test_avro_manifest = src/lake/avro_manifest.c src/lake/manifest_read.c src/lake/alloc_watch.c \
                                  src/lake/avro_container.c src/lake/avro_codec.c src/lake/avro_bound.c
UNIT_SOURCES_test_file_bounds = src/publish/file_bounds.c
UNIT_SOURCES_test_loss_sweep = src/sensor/loss_sweep.c
UNIT_SOURCES_test_airflow_rules = src/push/airflow_rules.c
UNIT_SOURCES_test_dagster_outcome = src/push/dagster_outcome.c
UNIT_SOURCES_test_watermark = src/lake/watermark.c
UNIT_SOURCES_test_marker_path = src/push/marker_path.c src/store/store_key.c
UNIT_SOURCES_test_store_key = src/store/store_key.c
UNIT_SOURCES_test_azure_sign = src/store/azure_sign.c
# The foreign libraries a unit test links besides libpgport.
UNIT_LIBS_test_avro_manifest = -lavro -lz -llzma -lsnappy
UNIT_LIBS_test_delta_log = -lpgcommon -lpgport
UNIT_TESTS = $(patsubst %.c,%,$(sort $(wildcard test/unit/test_*.c)))
EXTRA_CLEAN += $(UNIT_TESTS)

.SECONDEXPANSION:
test/unit/test_%: test/unit/test_%.c $$(UNIT_SOURCES_$$(notdir $$@))
	$(CC) $(CPPFLAGS) -I$(srcdir)/src -Wall -Wextra -Werror \
	  -Wno-missing-field-initializers -o $@ $< $(UNIT_SOURCES_$(notdir $@)) \
	  -L$(shell $(PG_CONFIG) --libdir) -L$(shell $(PG_CONFIG) --pkglibdir) -lpgport -lm \
	  $(UNIT_LIBS_$(notdir $@))

.PHONY: unitcheck
unitcheck: $(UNIT_TESTS)
	@status=0; for t in $(UNIT_TESTS); do ./$$t || status=1; done; exit $$status

# The temporary instance runs through wrappers (tmp_check/bin): initdb as
# test/lib's start_cluster runs it (-E UTF8 --locale=C.UTF-8, not the
# locale of the environment), and the server's own postgres, pg_ctl and
# psql. The superuser is named after the user running make, as initdb names
# it: the expected output never names it (the tests compare with
# current_user), so any user may run the tests.
.PHONY: regress-bin
regress-bin:
	@if [ "$$(id -u)" = 0 ]; then \
	  echo "make installcheck: initdb refuses to run as root; run it as another user" \
	       "(test/run-tests runs it as postgres), or against a running server with USE_EXISTING=1" >&2; \
	  exit 2; fi
	@rm -rf '$(REGRESS_TMP)/bin' && mkdir -p '$(REGRESS_TMP)/bin'
	@ln -s '$(bindir)/postgres' '$(bindir)/pg_ctl' '$(bindir)/psql' '$(REGRESS_TMP)/bin/'
	@printf '#!/bin/sh\nexec "%s/initdb" -E UTF8 --locale=C.UTF-8 "$$@"\n' '$(bindir)' >'$(REGRESS_TMP)/bin/initdb'
	@chmod +x '$(REGRESS_TMP)/bin/initdb'

install: install-finalize-docs
uninstall: uninstall-finalize-docs

.PHONY: install-finalize-docs uninstall-finalize-docs
install-finalize-docs:
	$(MKDIR_P) '$(DESTDIR)$(docdir)/extension/finalize'
	$(INSTALL_DATA) $(addprefix $(srcdir)/, $(FINALIZE_DOCS)) '$(DESTDIR)$(docdir)/extension/finalize/'

uninstall-finalize-docs:
	rm -rf '$(DESTDIR)$(docdir)/extension/finalize'

# The names of every pg_regress and isolation test (test/run-tests checks
# that each ran).
.PHONY: print-tests
print-tests:
	@echo $(REGRESS) $(ISOLATION)

.PHONY: meta
meta:
	python3 -c 'import json,sys; m=json.load(open("META.json")); m["version"]=sys.argv[1]; \
	  m["provides"]["$(EXTENSION)"]["version"]=sys.argv[1]; \
	  open("META.json","w").write(json.dumps(m, indent=3, ensure_ascii=False)+"\n")' $(EXTVERSION)
