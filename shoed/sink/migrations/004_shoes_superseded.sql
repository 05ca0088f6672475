-- A shoe of a replaced journal: when an operator starts a new journal (`shoed run
-- --new-journal`), the shoe that was being dealt is never ended or voided by any event
-- (the new journal does not know it). It is marked `superseded_at` (the time of the new
-- journal's first stored event) and `superseded_by` (that journal's instance) when the
-- first event of another instance of its table is stored; filled in here for the rows
-- before (the first event of another instance stored after the shoe's start). `shoes_open`: the shoes still in play, at most one a table.

ALTER TABLE shoes ADD COLUMN superseded_at timestamptz, ADD COLUMN superseded_by text;

UPDATE shoes s SET (superseded_at, superseded_by) = (
        SELECT e.ts, e.instance FROM events e, events started
        WHERE started.type = 'shoe_started' AND started.shoe_id = s.shoe_id
          AND started.instance = s.instance
          AND e.table_id = s.table_id AND e.instance <> s.instance
          AND e.stored_at > started.stored_at
        ORDER BY e.stored_at LIMIT 1)
    WHERE s.ended_at IS NULL AND s.voided_at IS NULL;

CREATE INDEX shoes_in_play ON shoes (table_id)
    WHERE ended_at IS NULL AND voided_at IS NULL AND superseded_at IS NULL;

CREATE VIEW shoes_open AS
    SELECT s.table_id, s.shoe_id, s.instance, s.started_at, now() - s.started_at AS open_for,
           (SELECT count(*) FROM hands h WHERE h.shoe_id = s.shoe_id
                AND h.result_at IS NOT NULL AND NOT coalesce(h.voided, false)) AS hands
    FROM shoes s
    WHERE s.ended_at IS NULL AND s.voided_at IS NULL AND s.superseded_at IS NULL
    ORDER BY s.table_id;
