-- Migration 2: hook queues, leader-elected bookkeeping, pod spec history. Released: never
-- edit; append a migration instead.

-- Every unit's queued hooks. AUTOINCREMENT: a seq is never reused, even after the hook
-- leaves the queue, so a commit naming a seq applies at most once.
CREATE TABLE hook_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL REFERENCES units (name),
    hook TEXT NOT NULL           -- Hook, JSON
) STRICT;
CREATE INDEX hook_queue_by_unit ON hook_queue (unit, seq);

-- The last term for which the unit ran leader-elected.
ALTER TABLE units ADD COLUMN elected_term INTEGER;

-- Every pod spec revision, written in the transaction that makes it.
CREATE TABLE pod_spec_history (
    app TEXT NOT NULL REFERENCES applications (name),
    revision INTEGER NOT NULL,
    spec TEXT NOT NULL,          -- JSON
    k8s_resources TEXT,          -- JSON
    PRIMARY KEY (app, revision)
) STRICT, WITHOUT ROWID;
-- A version 1 file kept only the current revision: the history starts there.
INSERT INTO pod_spec_history (app, revision, spec, k8s_resources)
    SELECT app, revision, spec, k8s_resources FROM pod_specs;
