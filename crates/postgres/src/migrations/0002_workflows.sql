-- idemdb schema version 2: the workflow tables — the outbox (with its due and reconciliation
-- indexes), webhook deliveries and the objects they describe, and queue jobs. Every value
-- column holds the core's encoded value (a format byte + bincode), the only copy of its
-- fields; the other columns are derived from it when it is written, for the indexes and for
-- operators. `{schema}` is replaced by the quoted schema name.

CREATE TABLE {schema}.idemdb_outbox (
    tenant          text COLLATE "C" NOT NULL,
    operation       text COLLATE "C" NOT NULL,
    key             text COLLATE "C" NOT NULL,
    effect          text COLLATE "C" NOT NULL,
    state           text NOT NULL,
    -- When a dispatcher should look next (pending: due; dispatching: end of the claim).
    due_at          bigint,
    -- When retention removes a finished item.
    forget_at       bigint,
    -- Set while the item is uncertain: when it entered the reconciliation queue.
    reconcile_since bigint,
    item            bytea NOT NULL,
    CONSTRAINT idemdb_outbox_key PRIMARY KEY (tenant, operation, key, effect)
);

CREATE INDEX idemdb_outbox_due ON {schema}.idemdb_outbox (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX idemdb_outbox_forget ON {schema}.idemdb_outbox (forget_at) WHERE forget_at IS NOT NULL;
CREATE INDEX idemdb_outbox_reconcile ON {schema}.idemdb_outbox (reconcile_since) WHERE reconcile_since IS NOT NULL;

-- The reconciliation queue's records: uncertain ones only.
CREATE INDEX idemdb_records_uncertain ON {schema}.idemdb_records (tenant) WHERE state = {state:uncertain};

CREATE TABLE {schema}.idemdb_deliveries (
    source      text COLLATE "C" NOT NULL,
    delivery_id text COLLATE "C" NOT NULL,
    outcome     text NOT NULL,
    received_at bigint NOT NULL,
    forget_at   bigint NOT NULL,
    delivery    bytea NOT NULL,
    CONSTRAINT idemdb_deliveries_key PRIMARY KEY (source, delivery_id)
);

CREATE INDEX idemdb_deliveries_forget ON {schema}.idemdb_deliveries (forget_at);

CREATE TABLE {schema}.idemdb_objects (
    source    text COLLATE "C" NOT NULL,
    object_id text COLLATE "C" NOT NULL,
    version   bigint NOT NULL,
    state     text NOT NULL,
    object    bytea NOT NULL,
    CONSTRAINT idemdb_objects_key PRIMARY KEY (source, object_id)
);

CREATE TABLE {schema}.idemdb_jobs (
    tenant    text COLLATE "C" NOT NULL,
    operation text COLLATE "C" NOT NULL,
    job       text COLLATE "C" NOT NULL,
    state     text NOT NULL,
    -- When retention removes a finished job.
    forget_at bigint,
    record    bytea NOT NULL,
    CONSTRAINT idemdb_jobs_key PRIMARY KEY (tenant, operation, job)
);

CREATE INDEX idemdb_jobs_forget ON {schema}.idemdb_jobs (forget_at) WHERE forget_at IS NOT NULL;
