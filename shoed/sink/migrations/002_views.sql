-- The usual questions.

CREATE VIEW cards_current AS
    SELECT DISTINCT ON (shoe_id, card_index) *
    FROM cards
    WHERE shoe_id IS NOT NULL AND card_index IS NOT NULL
    ORDER BY shoe_id, card_index, seq DESC;

-- Standing results (voided hands excluded) per table and hour.
CREATE VIEW results_per_table_hour AS
    SELECT table_id, date_trunc('hour', result_at) AS hour,
           count(*) AS hands,
           count(*) FILTER (WHERE winner = 'banker') AS banker,
           count(*) FILTER (WHERE winner = 'player') AS player,
           count(*) FILTER (WHERE winner = 'tie') AS tie,
           count(*) FILTER (WHERE player_pair) AS player_pairs,
           count(*) FILTER (WHERE banker_pair) AS banker_pairs,
           count(*) FILTER (WHERE player_natural OR banker_natural) AS naturals
    FROM hands
    WHERE result_at IS NOT NULL AND NOT voided
    GROUP BY table_id, date_trunc('hour', result_at);

-- Hands dealt per table and hour, standing and voided.
CREATE VIEW hands_per_hour AS
    SELECT table_id, date_trunc('hour', coalesce(result_at, voided_at)) AS hour,
           count(*) FILTER (WHERE NOT voided) AS hands,
           count(*) FILTER (WHERE voided) AS voided
    FROM hands
    GROUP BY table_id, date_trunc('hour', coalesce(result_at, voided_at));

CREATE VIEW alarms_open AS
    SELECT table_id, alarm_id, code, message, shoe_id, hand_no, card_index, raised_at,
           now() - raised_at AS open_for
    FROM alarms
    WHERE active
    ORDER BY raised_at;
