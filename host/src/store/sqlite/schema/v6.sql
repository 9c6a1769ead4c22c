-- Migration 6: charm modules kept in the store. Each is kept once, by the SHA-256 of its
-- bytes, so every host runs the same ones; an application names the module it runs.
-- Released: never edit; append a migration instead.

CREATE TABLE modules (
    hash TEXT PRIMARY KEY,      -- SHA-256 of the bytes, lowercase hex
    bytes BLOB NOT NULL
) STRICT;

-- NULL: the application's hosts load its module from `charm` (deployed before version 6).
ALTER TABLE applications ADD COLUMN module TEXT;
