-- Migration 4: removal. An application, unit or relation being removed is marked dying
-- while its units run their removal hooks; it is deleted after the last of them. Released:
-- never edit; append a migration instead.

ALTER TABLE applications ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;
ALTER TABLE relations ADD COLUMN dying INTEGER NOT NULL DEFAULT 0;
