-- Migration 8: generations, for what every hook of a large relation reads again and again:
-- each application's list of units, and each application bag of a relation. A generation
-- moves, by triggers, with every change to what it covers (a unit added, removed or marked
-- dying; a key of the bag written or removed). A host keeps what it last read with its
-- generation and reads one number instead while the generation stands: a database unit
-- related to 10,000 units reads their list in every hook, and each of those units reads
-- the database's application bag (its list of 10,000 allowed units) in every hook.
-- Generations come from one counter, so none is ever given twice: an application removed
-- and made again never repeats its predecessor's. An application whose units generation is
-- 0 never had a unit; a bag with no generation row has no keys.
-- Released: never edit; append a migration instead.

CREATE TABLE generation_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO generation_counter (id, value) VALUES (1, 1);

ALTER TABLE applications ADD COLUMN units_generation INTEGER NOT NULL DEFAULT 0;
-- What was there before this migration: generation 1.
UPDATE applications SET units_generation = 1;

CREATE TABLE app_bag_generations (
    relation INTEGER NOT NULL,
    app TEXT NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (relation, app)
) STRICT, WITHOUT ROWID;
INSERT INTO app_bag_generations (relation, app, generation)
    SELECT DISTINCT relation, app, 1 FROM relation_app_bags;

CREATE TRIGGER unit_added AFTER INSERT ON units BEGIN
    UPDATE generation_counter SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM generation_counter)
        WHERE name = NEW.app;
END;
CREATE TRIGGER unit_deleted AFTER DELETE ON units BEGIN
    UPDATE generation_counter SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM generation_counter)
        WHERE name = OLD.app;
END;
CREATE TRIGGER unit_dying AFTER UPDATE OF dying ON units WHEN OLD.dying IS NOT NEW.dying BEGIN
    UPDATE generation_counter SET value = value + 1;
    UPDATE applications SET units_generation = (SELECT value FROM generation_counter)
        WHERE name = NEW.app;
END;

CREATE TRIGGER app_bag_key_added AFTER INSERT ON relation_app_bags BEGIN
    UPDATE generation_counter SET value = value + 1;
    INSERT INTO app_bag_generations (relation, app, generation)
        VALUES (NEW.relation, NEW.app, (SELECT value FROM generation_counter))
        ON CONFLICT (relation, app) DO UPDATE SET generation = excluded.generation;
END;
CREATE TRIGGER app_bag_key_changed AFTER UPDATE ON relation_app_bags BEGIN
    UPDATE generation_counter SET value = value + 1;
    INSERT INTO app_bag_generations (relation, app, generation)
        VALUES (NEW.relation, NEW.app, (SELECT value FROM generation_counter))
        ON CONFLICT (relation, app) DO UPDATE SET generation = excluded.generation;
END;
CREATE TRIGGER app_bag_key_removed AFTER DELETE ON relation_app_bags BEGIN
    UPDATE generation_counter SET value = value + 1;
    UPDATE app_bag_generations SET generation = (SELECT value FROM generation_counter)
        WHERE relation = OLD.relation AND app = OLD.app;
END;
