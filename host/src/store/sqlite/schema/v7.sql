-- Migration 7: a unit's queued hooks found by their text. Queueing a hook on a unit asks
-- whether an equal hook waits already (coalescing); a database unit in a 10,000-unit
-- relation has 20,000 queued, which the check must not read one by one.
-- Released: never edit; append a migration instead.

CREATE INDEX hook_queue_by_hook ON hook_queue (unit, hook);
