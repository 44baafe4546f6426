/*
 * release_metadata.h
 *     What a release through an Iceberg catalog reads of a loadTable answer
 *     besides the snapshots (metadata.c): every ref with its type, and the
 *     partition specs with their fields' transforms.
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

/* The refs and partition specs of a table's metadata. */
typedef struct IcebergLayout
{
	int			nrefs;
	IcebergRef *refs;
	int			nspecs;
	IcebergSpec *specs;
	int64		format_version;
	int64		default_spec_id;
	char	   *table_uuid;		/* or NULL */
} IcebergLayout;

extern bool lake_parse_layout(const char *body, IcebergLayout *layout, char **error);
extern const IcebergRef *lake_layout_ref(const IcebergLayout *layout, const char *name);
extern const IcebergSpec *lake_layout_spec(const IcebergLayout *layout, int64 spec_id);

#endif							/* FINALIZE_LAKE_RELEASE_METADATA_H */
