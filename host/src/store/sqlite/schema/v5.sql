-- Migration 5: actions. An operator's action on a unit, from `run-action` to its hook's
-- commit; kept after its unit goes, as Juju keeps them. Released: never edit; append a
-- migration instead.

-- AUTOINCREMENT: an action id is never reused.
CREATE TABLE actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    state TEXT NOT NULL,         -- pending, running, completed, failed
    record TEXT NOT NULL         -- ActionRecord, JSON
) STRICT;
