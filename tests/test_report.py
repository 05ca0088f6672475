"""The shoe report (integrity.md section 3), built from a scripted shoe's real events."""

from __future__ import annotations

from typing import Any

from table import CUT, UNREAD, Table

from shoed.core import events as ev
from shoed.core.report import ShoeReportBuilder


class Reporter:
    """What the engine does with the builder: every event of the shoe, then the report."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.builder: ShoeReportBuilder | None = None
        self.reports: list[dict[str, Any]] = []
        self.seen = 0

    def pump(self, mono: float) -> None:
        for event in self.table.events[self.seen:]:
            if isinstance(event, ev.ShoeStarted):
                self.builder = ShoeReportBuilder(shoe_id=event.shoe_id or "", decks=event.decks)
            if self.builder is not None:
                self.builder.observe(event, mono)
        self.seen = len(self.table.events)
        if self.builder is not None and self.builder.finished:
            self.reports.append(self.builder.build())


def scripted_shoe() -> tuple[Table, Reporter]:
    table = Table(betting_control="none")
    reporter = Reporter(table)
    mono = 100.0

    def step(*cards: str) -> None:
        nonlocal mono
        for card in cards:
            table.draw(card)
            mono += 10.0
            reporter.pump(mono)

    table.load()
    reporter.pump(mono)
    step("AS", "2C")  # commencement: an ace burns one more
    step("KD", "4S", "3H", "5D", "4C")  # hand 1: player natural 9 against 7
    step("9C", UNREAD, "TH", "6H", "3C")  # hand 2: P1 unread, held
    unread = table.of("card")[-4].card_index
    table.cmd("manual_card", card_index=unread, card="TS")
    reporter.pump(mono)
    step("5S")  # P 6 stands, B 3 draws 5 -> 8: banker
    step("2D", "7D")  # hand 3, voided by the supervisor
    table.cmd("void_hand", hand_no=3, reason="dropped card")
    reporter.pump(mono)
    step("QS", "8S", "8H", "KS", "KH")  # hand 4: natural tie 8-8
    step(CUT)  # between hands: hand 4 was the last, the shoe ends
    step("3S")  # after the report: belongs to none
    return table, reporter


def test_report_of_a_scripted_shoe() -> None:
    table, reporter = scripted_shoe()
    assert "shoe_ended" in table.types()
    assert len(reporter.reports) == 1
    body = reporter.reports[0]
    event = ev.ShoeReport(event_id="T1-i1-99", seq=99, instance="i1",
                          ts="2027-01-01T00:00:00.000Z",
                          table_id="T1", shoe_id=table.of("shoe_started")[0].shoe_id,
                          hand_no=None, **body)  # the event model takes the body as is
    assert event.type == "shoe_report"
    assert body["decks"] == 8
    assert body["started"] == table.of("shoe_started")[0].ts
    assert body["ended"] == table.of("shoe_ended")[0].ts
    assert body["cards_drawn"] == 20
    assert body["cards_by_position"] == {"commencement": 1, "commencement_burn": 1, "burn": 4,
                                         "hand": 14, "unnecessary": 0, "after_shoe_end": 0}
    assert sum(body["cards_by_position"].values()) == body["cards_drawn"]
    assert (body["unread"], body["manual_entries"]) == (1, 1)
    assert (body["hands_played"], body["hands_voided"]) == (3, 1)
    assert body["winners"] == {"banker": 1, "player": 1, "tie": 1}
    assert body["supervisor_actions"] == {"manual_card": 1, "void_hand": 1}
    assert body["alarms"].get("card_unread") == 1
    assert body["integrity"] == []
    composition = body["composition"]
    assert composition["8S"] == 1 and composition["TS"] == 1 and "3S" not in composition
    assert composition["over"] == []
    assert sum(v for k, v in composition.items() if k != "over") == 20  # the unread, entered
    # mono: the shoe loaded at 100, each pull 10 s later, the cut card at 310; hand 1's
    # burn at 130, hand 4's last card at 300
    assert body["duration_s"] == 210.0
    assert body["hands_per_hour"] == round(3 * 3600 / (300 - 130), 1)


def test_report_counts_integrity_alarms_and_excess_cards() -> None:
    builder = ShoeReportBuilder(shoe_id="S1", decks=1)
    base = {"table_id": "T1", "shoe_id": "S1", "hand_no": None, "ts": "t"}
    n = 0

    def emit(cls: type[ev.EventBase], **fields: Any) -> None:
        nonlocal n
        n += 1
        builder.observe(cls(event_id=f"e{n}", seq=n, instance="i1", **{**base, **fields}), float(n))

    emit(ev.ShoeStarted, decks=1, table_type="commission", unnecessary_cards="burn_then_void",
         betting_control="none", trigger="new_shoe")
    for i, card in enumerate(["AS", "AS", "2S", None], 1):
        emit(ev.CardEvent, drawn_at="t", position="commencement" if i == 1 else
             "commencement_burn", card=card, card_index=i, device_card_index=i, pull_id=i,
             source="shoe", read="read" if card else "unread")
    emit(ev.Alarm, alarm_id="A1", code="shoe_order_suspect", active=True, message="m",
         card_index=2, momentary=True, detector="suited_step_run")
    emit(ev.Alarm, alarm_id="A2", code="shoe_unshuffled", active=True, message="m",
         card_index=3, detector="suited_step_run", cards=[{"card_index": 3, "card": "2S"}])
    emit(ev.Alarm, alarm_id="A2", code="shoe_unshuffled", active=False, message="cleared",
         card_index=3, detector="suited_step_run")
    emit(ev.CardEvent, drawn_at="t", position="commencement_burn", card="2S", card_index=4,
         device_card_index=4, pull_id=4, source="manual", read="manual")
    # an event of another shoe changes nothing
    emit(ev.SupervisorAction, command="void_shoe", operator="x", request_id="r",
         shoe_id="S0")
    emit(ev.ShoeVoided, reason="supervisor", operator="sup1")
    # a JSON round trip (the engine's snapshot) keeps everything
    builder = ShoeReportBuilder.model_validate_json(builder.model_dump_json())
    assert builder.finished
    body = builder.build()
    assert not builder.finished
    assert body["alarms"] == {"shoe_order_suspect": 1, "shoe_unshuffled": 1}
    assert body["integrity"] == [
        {"detector": "suited_step_run", "card_index": 2, "alarm": "shoe_order_suspect"},
        {"detector": "suited_step_run", "card_index": 3, "alarm": "shoe_unshuffled"}]
    assert body["composition"] == {"2S": 2, "AS": 2, "over": ["2S", "AS"]}
    assert (body["unread"], body["manual_entries"]) == (1, 1)
    assert body["supervisor_actions"] == {}
    assert body["hands_per_hour"] is None and body["hands_played"] == 0
    assert body["duration_s"] == 10.0
    # nothing after the report counts
    emit(ev.CardEvent, drawn_at="t", position="after_shoe_end", card="KS", card_index=5,
         device_card_index=5, pull_id=5, source="shoe")
    assert 5 not in builder.cards
