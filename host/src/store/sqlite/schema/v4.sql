-- Migration 4: removal, and charm logs. An application, unit or relation being removed is
-- marked dying while its units run their removal hooks; it is deleted after the last of
-- them. Released: never edit; append a migration instead.

ALTER TABLE applications ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;
ALTER TABLE relations ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;

-- What each unit's charm logged, a bounded ring per unit (the host trims it as it appends).
-- AUTOINCREMENT: a line's seq is never reused.
CREATE TABLE unit_logs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL REFERENCES units (name),
    hook TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL
) STRICT;
CREATE INDEX unit_logs_by_unit ON unit_logs (unit, seq);
