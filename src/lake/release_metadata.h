/*
 * release_metadata.h
 *     What a release through an Iceberg catalog reads of a loadTable answer
 *     besides the snapshots (metadata.c): every ref with its type, the
 *     partition specs with their fields' transforms, and the schemas'
 *     top-level columns with their types.
 */
#ifndef FINALIZE_LAKE_RELEASE_METADATA_H
#define FINALIZE_LAKE_RELEASE_METADATA_H

/* A branch or a tag of the table. */
typedef struct IcebergRef
{
	char	   *name;
	bool		is_tag;
	int64		snapshot_id;
} IcebergRef;

/* One field of a partition spec: its name and the transform that makes it. */
typedef struct IcebergSpecField
{
	char	   *name;
	char	   *transform;		/* identity, year, month, day, hour,
								 * bucket[N], truncate[W], void */
	int64		source_id;
} IcebergSpecField;

typedef struct IcebergSpec
{
	int64		spec_id;
	int			nfields;
	IcebergSpecField *fields;
} IcebergSpec;

/* A top-level column of a schema of the table. */
typedef struct IcebergColumn
{
	int64		id;
	char	   *name;
	char	   *type;			/* a primitive type's name (timestamptz, ...),
								 * NULL for a struct, list or map */
	bool		current;		/* of the current schema */
} IcebergColumn;

/* The refs, partition specs and columns of a table's metadata. */
typedef struct IcebergLayout
{
	int			nrefs;
	IcebergRef *refs;
	int			nspecs;
	IcebergSpec *specs;
	int			ncolumns;		/* of every schema, the current one's first */
	IcebergColumn *columns;
	int64		format_version;
	int64		default_spec_id;
	char	   *table_uuid;		/* or NULL */
} IcebergLayout;

extern bool lake_parse_layout(const char *body, IcebergLayout *layout, char **error);
extern const IcebergRef *lake_layout_ref(const IcebergLayout *layout, const char *name);
extern const IcebergSpec *lake_layout_spec(const IcebergLayout *layout, int64 spec_id);
extern const IcebergColumn *lake_layout_column(const IcebergLayout *layout, const char *name, int64 id);

#endif							/* FINALIZE_LAKE_RELEASE_METADATA_H */
