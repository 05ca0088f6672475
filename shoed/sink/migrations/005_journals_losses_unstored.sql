-- What the events alone could not say (an outside review, decisions.md 223).
--
-- journals: each table's journals (instances) in the order this database first stored
-- them (the database's clock, not the table's). A shoe left in play by a replaced
-- journal is superseded by a journal stored after its own, and the cursor never goes
-- back to a journal stored before the one it is in: a table PC whose clock is behind
-- (a replacement PC, a clock stepped back) no longer leaves two shoes open at one table,
-- and a worker that lost its table's lock cannot move the cursor back to an old journal.
CREATE TABLE journals (
    table_id        text NOT NULL,
    instance        text NOT NULL,
    first_stored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, instance)
);
INSERT INTO journals (table_id, instance, first_stored_at)
    SELECT table_id, instance, min(stored_at) FROM events GROUP BY table_id, instance;

-- events_lost: events the daemon's journal no longer held when the sink came for them
-- (pruned by retention while the sink was away, or a journal replaced: `possible` when
-- how many is not known; last_seq null then). One row per loss, written in the
-- transaction of the batch after it.
CREATE TABLE events_lost (
    table_id    text NOT NULL,
    instance    text NOT NULL,
    first_seq   bigint NOT NULL,
    last_seq    bigint,
    possible    boolean NOT NULL,
    detail      text NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, instance, first_seq)
);

-- events_unstored: an event the database cannot hold as it is (a text PostgreSQL refuses,
-- such as U+0000 in jsonb; a number out of a column's range) or that lacks what its rows
-- need (no `ts`, an alarm without `alarm_id`): its JSON text, kept whole, and why. The
-- sink goes on past it (its cursor moves), so one bad event stops no table.
CREATE TABLE events_unstored (
    table_id  text NOT NULL,
    instance  text NOT NULL,
    seq       numeric NOT NULL,
    event_id  text,
    type      text,
    body      text NOT NULL,
    error     text NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, instance, seq)
);
