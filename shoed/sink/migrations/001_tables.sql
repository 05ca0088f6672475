-- shoed sink: the tables. Every row comes from events; each event is applied once
-- (events.event_id is the idempotency key), in the transaction that moves its table's
-- cursor.

CREATE TABLE sink_cursor (
    table_id   text PRIMARY KEY,
    instance   text NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
    event_id  text PRIMARY KEY,
    table_id  text NOT NULL,
    instance  text NOT NULL,
    seq       bigint NOT NULL,
    type      text NOT NULL,
    ts        timestamptz NOT NULL,
    shoe_id   text,
    hand_no   integer,
    body      jsonb NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (table_id, instance, seq)
);

CREATE TABLE shoes (
    shoe_id           text PRIMARY KEY,
    table_id          text NOT NULL,
    instance          text NOT NULL,
    started_at        timestamptz NOT NULL,
    decks             integer,
    table_type        text,
    unnecessary_cards text,
    betting_control   text,
    ended_at          timestamptz,
    hands_played      integer,
    hands_voided      integer,
    voided_at         timestamptz,
    void_reason       text,
    voided_by         text
);
CREATE INDEX shoes_table ON shoes (table_id, started_at);

CREATE TABLE hands (
    shoe_id          text NOT NULL,
    hand_no          integer NOT NULL,
    table_id         text NOT NULL,
    result_at        timestamptz,
    player_cards     text[],
    banker_cards     text[],
    player_total     integer,
    banker_total     integer,
    winner           text,
    player_natural   boolean,
    banker_natural   boolean,
    player_pair      boolean,
    banker_pair      boolean,
    cards_dealt      integer,
    big_small        text,
    banker_six       boolean,
    payouts          jsonb,
    result_event_id  text,
    voided           boolean NOT NULL DEFAULT false,
    voided_at        timestamptz,
    void_reason      text,
    voided_by        text,
    result_withdrawn boolean,
    PRIMARY KEY (shoe_id, hand_no)
);
CREATE INDEX hands_table_time ON hands (table_id, result_at);

-- One row per card event: a manual entry or a later placement re-publishes the card
-- (same shoe_id, card_index); cards_current keeps the latest.
CREATE TABLE cards (
    event_id               text PRIMARY KEY,
    table_id               text NOT NULL,
    instance               text NOT NULL,
    seq                    bigint NOT NULL,
    shoe_id                text,
    hand_no                integer,
    card_index             integer,
    position               text,
    card                   text,
    source                 text,
    drawn_at               timestamptz,
    exposed_during_betting boolean
);
CREATE INDEX cards_shoe ON cards (shoe_id, card_index, seq);

CREATE TABLE alarms (
    alarm_id    text PRIMARY KEY,
    table_id    text NOT NULL,
    code        text NOT NULL,
    message     text,
    shoe_id     text,
    hand_no     integer,
    card_index  integer,
    fault_code  integer,
    momentary   boolean,
    active      boolean NOT NULL,
    raised_at   timestamptz NOT NULL,
    cleared_at  timestamptz
);

CREATE TABLE supervisor_actions (
    event_id   text PRIMARY KEY,
    table_id   text NOT NULL,
    shoe_id    text,
    hand_no    integer,
    ts         timestamptz NOT NULL,
    command    text NOT NULL,
    operator   text NOT NULL,
    request_id text NOT NULL,
    detail     jsonb
);

CREATE TABLE shoe_reports (
    shoe_id        text PRIMARY KEY,
    table_id       text NOT NULL,
    event_id       text NOT NULL,
    ts             timestamptz NOT NULL,
    hands_played   integer,
    hands_voided   integer,
    hands_per_hour double precision,
    cards_drawn    integer,
    report         jsonb NOT NULL
);
