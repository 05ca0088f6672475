-- alarms_open: the alarms of each table's live journal only. An alarm still active when
-- an operator started a new journal is never cleared by any event (the new journal does
-- not know it): it stays in `alarms`, as history, and leaves this view. The live journal
-- is the one the table's cursor is in; an alarm_id is "<table>-<instance>-A<n>".

CREATE OR REPLACE VIEW alarms_open AS
    SELECT a.table_id, a.alarm_id, a.code, a.message, a.shoe_id, a.hand_no, a.card_index,
           a.raised_at, now() - a.raised_at AS open_for
    FROM alarms a
    JOIN sink_cursor c ON c.table_id = a.table_id
    WHERE a.active AND starts_with(a.alarm_id, a.table_id || '-' || c.instance || '-')
    ORDER BY a.raised_at;
