-- idemdb schema version 1: metadata (the audit secret and the fence floor), records, the
-- expiry index and the audit trail. `{schema}` is replaced by the quoted schema name.

CREATE TABLE {schema}.idemdb_meta (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- The key of the keyed hashes in the audit trail and logs, made here from the server's
    -- strong random source (gen_random_uuid). Never leaves the database except to the adapter.
    secret      bytea NOT NULL CHECK (octet_length(secret) = 32),
    -- The highest fence of any record that retention removed: a fresh binding's fence is above it.
    fence_floor bigint NOT NULL DEFAULT 0 CHECK (fence_floor >= 0)
);

INSERT INTO {schema}.idemdb_meta (secret)
VALUES (sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')));

-- One row per (tenant, operation, key). `record` is the core's encoded record (version byte +
-- bincode), the only copy of the record's fields; `state` and `due_at` are derived from it
-- when it is written, for operators and for the expiry index.
CREATE TABLE {schema}.idemdb_records (
    tenant    text COLLATE "C" NOT NULL,
    operation text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    state     text NOT NULL,
    due_at    bigint,
    record    bytea NOT NULL,
    CONSTRAINT idemdb_records_scope_key PRIMARY KEY (tenant, operation, key)
);

CREATE INDEX idemdb_records_due ON {schema}.idemdb_records (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE {schema}.idemdb_audit (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                 bigint NOT NULL,
    kind               text NOT NULL,
    tenant             text NOT NULL,
    operation          text NOT NULL,
    key_hash           bytea NOT NULL CHECK (octet_length(key_hash) = 16),
    fence              bigint NOT NULL,
    fingerprint_prefix bytea CHECK (octet_length(fingerprint_prefix) = 8),
    correlation        text
);

CREATE INDEX idemdb_audit_at ON {schema}.idemdb_audit (at);
