-- Migration 1: the schema of version 1. Released: never edit; append a migration instead.
CREATE TABLE model (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL
) STRICT;
CREATE TABLE applications (
    name TEXT PRIMARY KEY,
    charm TEXT NOT NULL,
    metadata TEXT NOT NULL,      -- CharmMetadata, JSON
    config TEXT NOT NULL,        -- the operator's settings, JSON
    status TEXT NOT NULL,        -- Status, JSON
    next_unit INTEGER NOT NULL
) STRICT;
CREATE TABLE units (
    name TEXT PRIMARY KEY,
    app TEXT NOT NULL REFERENCES applications (name),
    number INTEGER NOT NULL,
    status TEXT NOT NULL,        -- Status, JSON
    workload_version TEXT NOT NULL,
    hook_error TEXT,
    UNIQUE (app, number)
) STRICT;
CREATE TABLE leader_data (
    app TEXT NOT NULL REFERENCES applications (name),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (app, key)
) STRICT, WITHOUT ROWID;
-- AUTOINCREMENT: a relation id is never reused.
CREATE TABLE relations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    interface TEXT NOT NULL,
    endpoints TEXT NOT NULL      -- [RelationEndpoint], JSON
) STRICT;
CREATE TABLE relation_unit_bags (
    relation INTEGER NOT NULL REFERENCES relations (id),
    unit TEXT NOT NULL REFERENCES units (name),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (relation, unit, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE relation_app_bags (
    relation INTEGER NOT NULL REFERENCES relations (id),
    app TEXT NOT NULL REFERENCES applications (name),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (relation, app, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE pod_specs (
    app TEXT PRIMARY KEY REFERENCES applications (name),
    revision INTEGER NOT NULL,
    spec TEXT NOT NULL,          -- JSON
    k8s_resources TEXT           -- JSON
) STRICT;
CREATE TABLE stored_state (
    unit TEXT NOT NULL REFERENCES units (name),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (unit, key)
) STRICT, WITHOUT ROWID;
-- No foreign key: a lease may be claimed before its application is added.
CREATE TABLE leases (
    app TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    term INTEGER NOT NULL,
    expiry_ms INTEGER NOT NULL   -- wall clock, milliseconds since the UNIX epoch
) STRICT;
-- Kept after a lease expires or is released, so terms never repeat.
CREATE TABLE last_terms (
    app TEXT PRIMARY KEY,
    term INTEGER NOT NULL
) STRICT;
