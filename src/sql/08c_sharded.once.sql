-- Sharded tables (docs/sharding.md): one lake table fed by the same SQL
-- Server table in many databases, each database a shard. A sharded table
-- (kind sharded) holds the policy every shard follows (granularity, zone,
-- DDL and data-loss policies, event time) and is derived from its shards
-- (derived_input): its verdict is their least verdict, by the one rule of
-- derived tables (_inputs_until, _advance). Each shard is a tracked table
-- of kind source named <sharded table>/<shard> (shard_of, shard), read by
-- the worker of its server like any other, with its own verdict, status,
-- consumers and losses. The functions a role calls are C entry points
-- (finalize_as_owner) that run the body _<name>(caller, ...) as the
-- extension's owner.

-- The consumers declared on a sharded table (finalize.add_consumer on it):
-- each is a consumer of every shard, declared on a shard when it is added.
CREATE TABLE @extschema@.shard_consumer (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    consumer       text COLLATE "C" NOT NULL
                   CHECK (length(consumer) BETWEEN 1 AND 255),
    required       boolean NOT NULL DEFAULT true,
    reporter       regrole,
    reporter_name  name,
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     name NOT NULL,
    PRIMARY KEY (table_id, consumer)
);
COMMENT ON TABLE @extschema@.shard_consumer IS
    'Consumers declared on a sharded table: each is a consumer of every shard, now and when one is added';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.shard_consumer', '');
