-- Migration 8: a generation for each application's list of units, moved by every insert,
-- delete or dying mark of one of its units. A host keeps the list of live units it last
-- read with its generation, and reads one number instead of the whole list while the
-- generation stands: a database unit in a 10,000-unit relation reads the other side's
-- list in every hook. The generations come from one counter, so an application removed
-- and made again never repeats one of its predecessor's; a generation of 0 means no unit
-- was ever added to it.
-- Released: never edit; append a migration instead.

CREATE TABLE units_generation (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO units_generation (id, value) VALUES (1, 1);
ALTER TABLE applications ADD COLUMN units_generation INTEGER NOT NULL DEFAULT 0;
-- Applications from before this migration may have units: a generation of their own.
UPDATE applications SET units_generation = 1;

CREATE TRIGGER unit_added AFTER INSERT ON units BEGIN
    UPDATE units_generation SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM units_generation)
        WHERE name = NEW.app;
END;
CREATE TRIGGER unit_deleted AFTER DELETE ON units BEGIN
    UPDATE units_generation SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM units_generation)
        WHERE name = OLD.app;
END;
CREATE TRIGGER unit_dying AFTER UPDATE OF dying ON units WHEN OLD.dying IS NOT NEW.dying BEGIN
    UPDATE units_generation SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM units_generation)
        WHERE name = NEW.app;
END;
