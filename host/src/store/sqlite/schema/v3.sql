-- Migration 3: which applications each relation joins, indexed by application, so a hook's
-- snapshot and commit read the unit's relations instead of decoding all of them. Released:
-- never edit; append a migration instead.

CREATE TABLE relation_apps (
    app TEXT NOT NULL REFERENCES applications (name),
    relation INTEGER NOT NULL REFERENCES relations (id),
    PRIMARY KEY (app, relation)
) STRICT, WITHOUT ROWID;
INSERT OR IGNORE INTO relation_apps (app, relation)
    SELECT json_extract(e.value, '$.app'), r.id FROM relations r, json_each(r.endpoints) e;
