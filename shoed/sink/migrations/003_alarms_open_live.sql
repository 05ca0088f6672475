-- alarms_open: the alarms of each table's live journal only. An alarm still active when
-- an operator started a new journal is never cleared by any event (the new journal does
-- not know it): it stays in `alarms`, as history, and leaves this view. An alarm's
-- journal is the instance of the event that raised it (`alarms.instance`, kept from now
-- on, filled in here for the rows before); a table's live journal is the instance of
-- its latest stored event.

ALTER TABLE alarms ADD COLUMN instance text;

UPDATE alarms a SET instance = e.instance
    FROM events e
    WHERE e.type = 'alarm' AND e.body->>'alarm_id' = a.alarm_id AND a.instance IS NULL;

CREATE INDEX events_table_stored ON events (table_id, stored_at DESC);

CREATE OR REPLACE VIEW alarms_open AS
    SELECT a.table_id, a.alarm_id, a.code, a.message, a.shoe_id, a.hand_no, a.card_index,
           a.raised_at, now() - a.raised_at AS open_for
    FROM alarms a
    WHERE a.active AND a.instance IS NOT DISTINCT FROM (
        SELECT e.instance FROM events e WHERE e.table_id = a.table_id
        ORDER BY e.stored_at DESC LIMIT 1)
    ORDER BY a.raised_at;
