/*
 * avro_manifest.h
 *     An Iceberg snapshot's manifest list and manifests (Apache Avro object
 *     container files) read with libavro: each manifest of a list, each
 *     file entry of a manifest with its partition tuple, and the key-value
 *     metadata of their Avro header. Pure: it decodes bytes already in
 *     memory, one record at a time, and hands each to a callback; nothing
 *     here reads a file, the network or PostgreSQL, and nothing needs
 *     postgres.h (the C unit test builds it alone).
 *
 * Every pointer handed to a callback (strings, the partition array) is
 * valid during that call only: a caller copies what it keeps. A callback
 * must return (0 to go on, non-zero to stop) and never longjmp out (no
 * ereport(ERROR) inside it): libavro's objects and this file's buffers are
 * freed on the way out of the read, which a longjmp would skip. A read that
 * a callback stopped returns the callback's value, err untouched; callers
 * use positive values, the negative AVRO_READ_* are the reader's own.
 *
 * What a read may cost is bounded (avro_read_limits): the bytes of a
 * file's blocks once decompressed, all together, and a stop function
 * asked while decompressing and between records. A file whose schema
 * libavro could not decode within bounds (a type that contains itself, an
 * array or map of items written in no bytes) is refused before any record.
 */
#ifndef FINALIZE_LAKE_AVRO_MANIFEST_H
#define FINALIZE_LAKE_AVRO_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One manifest_file record of a manifest list (Iceberg spec, field ids
 * 500-519). A has_ flag is false when the field is absent from the file's
 * schema (v1 lists have no content or sequence numbers) or null.
 */
typedef struct IcebergManifestFile
{
	const char *manifest_path;	/* 500 */
	int64_t		manifest_length;	/* 501 */
	int32_t		partition_spec_id;	/* 502 */
	int32_t		content;		/* 517: 0 data, 1 deletes; 0 when absent (v1) */
	bool		has_sequence_number;
	int64_t		sequence_number;	/* 515 */
	bool		has_min_sequence_number;
	int64_t		min_sequence_number;	/* 516 */
	bool		has_added_snapshot_id;
	int64_t		added_snapshot_id;	/* 503 */
	bool		has_added_files_count;
	int32_t		added_files_count;	/* 504 (v1 writers: added_data_files_count) */
	bool		has_existing_files_count;
	int32_t		existing_files_count;	/* 505 */
	bool		has_deleted_files_count;
	int32_t		deleted_files_count;	/* 506 */
	bool		has_added_rows_count;
	int64_t		added_rows_count;	/* 512 */
	bool		has_existing_rows_count;
	int64_t		existing_rows_count;	/* 513 */
	bool		has_deleted_rows_count;
	int64_t		deleted_rows_count; /* 514 */
} IcebergManifestFile;

/*
 * The Avro type a partition value was written as: Iceberg's date and the
 * day, month, year, hour and bucket transforms are INT (days since
 * 1970-01-01 for a date and a day), a timestamp is LONG (microseconds since
 * 1970-01-01), a decimal or uuid is FIXED or BYTES. libavro keeps no
 * logical type: the manifest's "partition-spec" metadata says which
 * transform made a field.
 */
typedef enum IcebergValueType
{
	ICEBERG_VALUE_INT,
	ICEBERG_VALUE_LONG,
	ICEBERG_VALUE_STRING,
	ICEBERG_VALUE_BOOLEAN,
	ICEBERG_VALUE_FLOAT,
	ICEBERG_VALUE_DOUBLE,
	ICEBERG_VALUE_BYTES,
	ICEBERG_VALUE_FIXED
} IcebergValueType;

/* One field of a data file's partition tuple. */
typedef struct IcebergPartitionValue
{
	const char *name;			/* the partition field's name */
	IcebergValueType type;		/* as written (the non-null branch of a union) */
	bool		is_null;
	const char *text;			/* NULL when null; numbers in decimal
								 * (floats %.17g), true/false, strings as
								 * written, bytes and fixed in lower-case hex */
	int64_t		int_value;		/* INT, LONG and BOOLEAN: the value */
} IcebergPartitionValue;

/*
 * One column's bound in a data file's lower_bounds or upper_bounds (maps
 * of column id to Iceberg's single-value binary serialization: field ids
 * 125-127 and 128-130); what the bytes mean depends on the column's type
 * (publish/file_bounds.c reads time columns').
 */
typedef struct IcebergBound
{
	int32_t		field_id;		/* the column's id (126, 129) */
	const char *value;			/* its bound (127, 130), len bytes */
	size_t		len;
} IcebergBound;

/* One column's count in a data file's null_value_counts (field ids 110-112). */
typedef struct IcebergCount
{
	int32_t		field_id;		/* the column's id (121) */
	int64_t		count;			/* its rows where it is null (122) */
} IcebergCount;

/*
 * One manifest_entry record of a manifest with its data_file (Iceberg
 * spec, field ids 0-4 and 100-146).
 */
typedef struct IcebergManifestEntry
{
	int32_t		status;			/* 0: 0 EXISTING, 1 ADDED, 2 DELETED */
	bool		has_snapshot_id;
	int64_t		snapshot_id;	/* 1 (null in v2: inherited) */
	bool		has_sequence_number;
	int64_t		sequence_number;	/* 3 (v2; null: inherited) */
	bool		has_file_sequence_number;
	int64_t		file_sequence_number;	/* 4 (v2; null: inherited) */
	int32_t		content;		/* 134: 0 data, 1 position deletes, 2
								 * equality deletes; 0 when absent (v1) */
	const char *file_path;		/* 100 */
	const char *file_format;	/* 101: avro, orc, parquet (as written) */
	int64_t		record_count;	/* 103 */
	int64_t		file_size_in_bytes; /* 104 */
	const char *referenced_data_file;	/* 143, or NULL */
	int			npartition;
	const IcebergPartitionValue *partition; /* 102, in the schema's order */
	int			nlower_bounds;	/* 125: none when absent or null */
	const IcebergBound *lower_bounds;
	int			nupper_bounds;	/* 128 */
	const IcebergBound *upper_bounds;
	int			nnull_value_counts; /* 110: none when absent or null */
	const IcebergCount *null_value_counts;
} IcebergManifestEntry;

/* The reader's own results (besides 0 and a callback's positive value); err says more. */
#define AVRO_READ_FAILED (-1)	/* not a file the reader can read */
#define AVRO_READ_TOO_LARGE (-2)	/* its blocks decompress to more than the limit */
#define AVRO_READ_STOPPED (-3)	/* the stop function asked to */

/* The limit of the decompressed bytes of one file until avro_read_limits sets another. */
#define AVRO_DEFAULT_MAX_BYTES ((size_t) 128 << 20)

typedef int (*ManifestListCallback) (const IcebergManifestFile *manifest, void *arg);
typedef int (*ManifestEntryCallback) (const IcebergManifestEntry *entry, void *arg);
/* value: len bytes, not NUL-terminated (a JSON text or a number, as Iceberg writes them) */
typedef int (*AvroMetadataCallback) (const char *key, const void *value, size_t len, void *arg);

extern int	avro_manifest_list_read(const char *buf, size_t len, ManifestListCallback cb,
									void *arg, char *err, size_t errlen);
extern int	avro_manifest_read(const char *buf, size_t len, ManifestEntryCallback cb,
							   void *arg, char *err, size_t errlen);
extern int	avro_manifest_metadata(const char *buf, size_t len, AvroMetadataCallback cb,
								   void *arg, char *err, size_t errlen);
extern void avro_read_limits(size_t max_bytes, bool (*stop) (void));

#endif							/* FINALIZE_LAKE_AVRO_MANIFEST_H */
