"""The scoreboard core (roads.md): worked examples, hand-checked layouts, invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoed.core.roads import (
    DERIVED_ROADS,
    HandOutcome,
    RoadsMessage,
    Scoreboard,
    roads_message,
)

LETTER = {"B": "banker", "P": "player", "T": "tie"}
ROADS = [name for name, _ in DERIVED_ROADS]


def outcomes(winners: str) -> list[HandOutcome]:
    return [HandOutcome(i + 1, LETTER[c]) for i, c in enumerate(winners.split())]  # type: ignore[arg-type]


def board(winners: str, **kwargs) -> dict:
    return roads_message(outcomes(winners), seq=7, shoe_id="T01-1", **kwargs)


def big_cells(message: dict) -> list[tuple[str, int, int]]:
    return [(c["winner"][0].upper(), c["col"], c["row"]) for c in message["big_road"]]


def runs(*pairs: tuple[str, int]) -> str:
    return " ".join(letter for letter, count in pairs for _ in range(count))


# --- roads.md section 8 --------------------------------------------------------------


def test_example_1_streaks_and_derived_roads():
    message = board("B B P P P B P B B")
    assert big_cells(message) == [("B", 0, 0), ("B", 0, 1), ("P", 1, 0), ("P", 1, 1),
                                  ("P", 1, 2), ("B", 2, 0), ("P", 3, 0), ("B", 4, 0),
                                  ("B", 4, 1)]
    assert message["big_eye_boy"]["marks"] == ["red", "blue", "blue", "blue", "red", "blue"]
    assert message["small_road"]["marks"] == ["blue", "blue", "blue"]
    assert message["cockroach_pig"]["marks"] == ["blue", "red"]
    # laid out like the big road: a new column at every change of colour
    assert [(c["colour"], c["col"], c["row"], c["hand_no"])
            for c in message["big_eye_boy"]["cells"]] == [
        ("red", 0, 0, 4), ("blue", 1, 0, 5), ("blue", 1, 1, 6), ("blue", 1, 2, 7),
        ("red", 2, 0, 8), ("blue", 3, 0, 9)]
    assert [(c["col"], c["row"]) for c in message["small_road"]["cells"]] == [
        (0, 0), (0, 1), (0, 2)]
    assert [(c["col"], c["row"]) for c in message["cockroach_pig"]["cells"]] == [
        (0, 0), (1, 0)]
    # a banker would be entry (5, 3): against streaks 4 (1), 3 (1), 2 (3): red, red, red;
    # a player would open streak 6: streak 5 (2) against 4, 3, 2 (1, 1, 3): all blue
    assert message["ask"] == {
        "banker": {"big_eye_boy": "red", "small_road": "red", "cockroach_pig": "red"},
        "player": {"big_eye_boy": "blue", "small_road": "blue", "cockroach_pig": "blue"}}
    assert message["stats"] == {
        "hands": 9, "banker": 5, "player": 4, "tie": 0, "player_pair": 0, "banker_pair": 0,
        "natural": 0, "longest_banker_streak": 2, "longest_player_streak": 3,
        "current_streak": {"side": "banker", "length": 2}}


def test_example_2_leading_ties_on_the_first_cell():
    message = board("T T B")
    assert message["big_road"] == [{"hand_no": 3, "winner": "banker", "ties": 2,
                                    "player_pair": False, "banker_pair": False,
                                    "natural": False, "col": 0, "row": 0}]
    assert [(c["hand_no"], c["winner"], c["col"], c["row"]) for c in message["bead_plate"]] == [
        (1, "tie", 0, 0), (2, "tie", 0, 1), (3, "banker", 0, 2)]


def test_example_3_dragon_tail_and_the_next_streak():
    message = board(runs(("B", 7), ("P", 1)))
    assert big_cells(message) == [("B", 0, r) for r in range(6)] + [("B", 1, 5), ("P", 1, 0)]


def test_the_spec_message_after_one_banker_natural():
    message = roads_message([HandOutcome(1, "banker", natural=True)], seq=1234,
                            shoe_id="T01-...")
    assert message == {
        "schema_version": 1, "seq": 1234, "shoe_id": "T01-...", "rows": 6,
        "tail_mode": "stay",
        "bead_plate": [{"hand_no": 1, "winner": "banker", "player_pair": False,
                        "banker_pair": False, "natural": True, "col": 0, "row": 0}],
        "big_road": [{"hand_no": 1, "winner": "banker", "ties": 0, "player_pair": False,
                      "banker_pair": False, "natural": True, "col": 0, "row": 0}],
        "big_eye_boy": {"marks": [], "cells": []},
        "small_road": {"marks": [], "cells": []},
        "cockroach_pig": {"marks": [], "cells": []},
        "ask": {"banker": {"big_eye_boy": None, "small_road": None, "cockroach_pig": None},
                "player": {"big_eye_boy": None, "small_road": None, "cockroach_pig": None}},
        "stats": {"hands": 1, "banker": 1, "player": 0, "tie": 0, "player_pair": 0,
                  "banker_pair": 0, "natural": 1, "longest_banker_streak": 1,
                  "longest_player_streak": 0,
                  "current_streak": {"side": "banker", "length": 1}}}
    parsed = RoadsMessage.model_validate(message)
    assert parsed.model_dump(mode="json", exclude_unset=True) == message


# --- hand-checked layouts ------------------------------------------------------------


def test_ties_only_one_cell_with_no_hand():
    message = board("T T T")
    assert message["big_road"] == [{"hand_no": None, "winner": None, "ties": 3,
                                    "player_pair": False, "banker_pair": False,
                                    "natural": False, "col": 0, "row": 0}]
    assert len(message["bead_plate"]) == 3
    assert message["stats"]["tie"] == 3 and message["stats"]["current_streak"] is None
    assert all(message["ask"][side][road] is None for side in ("banker", "player")
               for road in ROADS)
    assert RoadsMessage.model_validate(message)


def test_empty_shoe():
    message = roads_message([], seq=3, shoe_id="T01-2")
    assert message["bead_plate"] == [] and message["big_road"] == []
    assert message["stats"]["hands"] == 0 and message["stats"]["current_streak"] is None


def test_ties_count_on_the_cell_before_and_show_their_pairs_on_the_bead_plate_only():
    results = [HandOutcome(1, "banker", banker_pair=True), HandOutcome(2, "tie"),
               HandOutcome(3, "tie", player_pair=True, natural=True),
               HandOutcome(4, "player"), HandOutcome(5, "tie")]
    message = roads_message(results, seq=1, shoe_id=None)
    assert [(c["hand_no"], c["ties"], c["player_pair"], c["banker_pair"], c["natural"])
            for c in message["big_road"]] == [(1, 2, False, True, False),
                                              (4, 1, False, False, False)]
    assert message["bead_plate"][2]["player_pair"] and message["bead_plate"][2]["natural"]
    stats = message["stats"]
    assert (stats["tie"], stats["player_pair"], stats["banker_pair"], stats["natural"]) == (
        3, 1, 1, 1)


def test_bead_plate_fills_column_by_column():
    message = board(" ".join("BPT"[i % 3] for i in range(14)), rows=4)
    assert [(c["col"], c["row"]) for c in message["bead_plate"]] == [
        (i // 4, i % 4) for i in range(14)]


def test_a_tail_runs_under_later_streaks_which_turn_one_row_earlier():
    message = board(runs(("B", 8), ("P", 6), ("B", 5), ("P", 1)))
    assert big_cells(message) == (
        [("B", 0, r) for r in range(6)] + [("B", 1, 5), ("B", 2, 5)]
        + [("P", 1, r) for r in range(5)] + [("P", 2, 4)]
        + [("B", 2, r) for r in range(4)] + [("B", 3, 3)]
        + [("P", 3, 0)])


def test_an_opening_cell_taken_by_a_tail_moves_right():
    # rows = 3: three stacked tails reach row 0; the next streak opens past them
    message = board(runs(("B", 6), ("P", 4), ("B", 3), ("P", 1), ("B", 2)), rows=3)
    assert big_cells(message) == [
        ("B", 0, 0), ("B", 0, 1), ("B", 0, 2), ("B", 1, 2), ("B", 2, 2), ("B", 3, 2),
        ("P", 1, 0), ("P", 1, 1), ("P", 2, 1), ("P", 3, 1),
        ("B", 2, 0), ("B", 3, 0), ("B", 4, 0),
        ("P", 5, 0),  # columns 3 and 4 of row 0 are under the last tail
        ("B", 6, 0), ("B", 6, 1),  # right of where the previous streak opened
    ]


def test_drop_mode_goes_down_again_once_the_tail_below_ends():
    winners = runs(("B", 9), ("P", 10), ("B", 1))
    stay = board(winners)
    drop = board(winners, tail_mode="drop")
    banker = [("B", 0, r) for r in range(6)] + [("B", 1, 5), ("B", 2, 5), ("B", 3, 5)]
    assert big_cells(stay) == banker + [("P", 1, r) for r in range(5)] + [
        ("P", c, 4) for c in range(2, 7)] + [("B", 2, 0)]
    assert big_cells(drop) == banker + [("P", 1, r) for r in range(5)] + [
        ("P", 2, 4), ("P", 3, 4), ("P", 4, 4), ("P", 4, 5), ("P", 5, 5)] + [("B", 2, 0)]
    assert drop["tail_mode"] == "drop"


def test_drop_mode_staircase_under_two_tails():
    message = board(runs(("B", 9), ("P", 10), ("B", 8)), tail_mode="drop")
    third = [c for c in big_cells(message)][19:]
    # down column 2 to row 3, right above P's tail, down where it stepped down, and so on
    assert third == [("B", 2, 0), ("B", 2, 1), ("B", 2, 2), ("B", 2, 3), ("B", 3, 3),
                     ("B", 4, 3), ("B", 5, 3), ("B", 5, 4)]


def test_derived_roads_drop_mode_lay_out_marks_the_same_way():
    # alternating results: every column is as long as the one before, so all red
    message = board(" ".join(["B", "P"] * 7), tail_mode="drop", rows=3)
    marks = message["big_eye_boy"]["marks"]
    assert marks == ["red"] * 12  # from streak 3 on
    assert [(c["col"], c["row"]) for c in message["big_eye_boy"]["cells"]] == [
        (0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2),
        (8, 2), (9, 2)][:len(marks)]


def test_hand_outcome_from_a_hand_result_event():
    from shoed.core.events import HandResultEvent

    event = HandResultEvent(event_id="e", seq=5, instance="i1", ts="t", table_id="T01", shoe_id="s",
                            hand_no=4, player_cards=["8S", "KD"], banker_cards=["2C", "3C"],
                            player_total=8, banker_total=5, winner="player",
                            player_natural=True, banker_natural=False, player_pair=False,
                            banker_pair=True, cards_dealt=4, big_small="small",
                            banker_six=False, payouts={}, card_indexes=[1, 2, 3, 4])
    expected = HandOutcome(4, "player", player_pair=False, banker_pair=True, natural=True)
    assert HandOutcome.from_event(event) == expected
    assert HandOutcome.from_event(event.model_dump(mode="json")) == expected


def test_standing_results_survive_a_json_round_trip():
    import json

    results = [HandOutcome(1, "tie", player_pair=True, natural=True), HandOutcome(2, "banker")]
    stored = json.loads(json.dumps([r.as_dict() for r in results]))
    assert [HandOutcome.from_dict(v) for v in stored] == results
    with pytest.raises(ValueError, match="needs 'natural'"):
        HandOutcome.from_dict({"hand_no": 1, "winner": "tie", "player_pair": False,
                               "banker_pair": False})
    with pytest.raises(ValueError, match="winner must be"):
        HandOutcome.from_dict({**stored[0], "winner": "dragon"})


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="winner must be"):
        HandOutcome(1, "dragon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a hand_result needs 'banker_natural'"):
        HandOutcome.from_event({"hand_no": 1, "winner": "tie", "player_pair": False,
                                "banker_pair": False, "player_natural": False})
    with pytest.raises(ValueError, match="integer hand_no, got None"):
        HandOutcome.from_event({"hand_no": None, "winner": "tie"})
    with pytest.raises(ValueError, match="rows must be"):
        Scoreboard(rows=0)
    with pytest.raises(ValueError, match="tail_mode must be"):
        Scoreboard(tail_mode="wrap")  # type: ignore[arg-type]
    scoreboard = Scoreboard("s", results=outcomes("B P"))
    with pytest.raises(ValueError, match="hand 2 already has a standing result"):
        scoreboard.append(HandOutcome(2, "banker"))


def test_void_and_reset():
    scoreboard = Scoreboard("s1", results=outcomes("B B P T P"))
    assert scoreboard.void(3)
    assert not scoreboard.void(3) and not scoreboard.void(99)
    assert scoreboard.message(9) == roads_message(
        [r for r in outcomes("B B P T P") if r.hand_no != 3], seq=9, shoe_id="s1")
    scoreboard.reset("s2")
    assert scoreboard.message(10) == roads_message([], seq=10, shoe_id="s2")


# --- invariants ----------------------------------------------------------------------

letters = st.sampled_from("BPT")
plain = st.lists(letters, max_size=60)
streaky = st.lists(st.tuples(st.sampled_from("BP"), st.integers(1, 14)), max_size=14).map(
    lambda pairs: [letter for letter, n in pairs for _ in range(n)])
with_ties = st.tuples(st.integers(0, 4), st.one_of(plain, streaky),
                      st.integers(0, 3)).map(lambda t: ["T"] * t[0] + t[1] + ["T"] * t[2])
long_shoe = st.lists(st.sampled_from("BBBBPPPPT"), min_size=150, max_size=180)
sequences = st.one_of(with_ties, st.lists(st.just("T"), max_size=5), long_shoe)
layouts = st.tuples(st.sampled_from([3, 4, 6, 8]), st.sampled_from(["stay", "drop"]))


def to_results(winners: list[str]) -> list[HandOutcome]:
    return [HandOutcome(i + 1, LETTER[c], player_pair=i % 7 == 0,  # type: ignore[arg-type]
                        banker_pair=i % 5 == 0, natural=i % 3 == 0)
            for i, c in enumerate(winners)]


def started_entries(k: int, lengths: list[int]) -> int:
    """Entries from road k's start on, counted from the streak lengths alone."""
    return sum(length - 1 if n == k + 1 else (length if n >= k + 2 else 0)
               for n, length in enumerate(lengths, start=1))


def check_board(message: dict, results: list[HandOutcome], rows: int) -> None:
    non_ties = [r.hand_no for r in results if r.winner != "tie"]
    big = message["big_road"]
    if non_ties:
        assert [c["hand_no"] for c in big] == non_ties  # exactly one cell per result
        assert sum(c["ties"] for c in big) == len(results) - len(non_ties)
    elif results:
        assert len(big) == 1 and big[0]["hand_no"] is None and big[0]["ties"] == len(results)
    else:
        assert big == []
    lengths: list[int] = []
    previous: dict | None = None
    opened = -1
    for cell in big:
        if cell["winner"] is None:
            continue
        assert 0 <= cell["row"] < rows
        if previous is None or previous["winner"] != cell["winner"]:
            lengths.append(1)
            assert cell["row"] == 0  # every streak opens in row 0 ...
            assert cell["col"] > opened  # ... right of where the previous one opened
            opened = cell["col"]
        else:
            lengths[-1] += 1
            step = (cell["col"] - previous["col"], cell["row"] - previous["row"])
            assert step in ((0, 1), (1, 0))  # never jumps in the layouts above
            if message["tail_mode"] == "stay" and previous["col"] != opened:
                assert step == (1, 0)  # once turned, a stay-mode tail stays on its row
        previous = cell
    for name in ["bead_plate", "big_road", *ROADS]:
        cells = message[name] if name in ("bead_plate", "big_road") else message[name]["cells"]
        positions = [(c["col"], c["row"]) for c in cells]
        assert len(set(positions)) == len(positions), name
        assert all(0 <= row < rows for _, row in positions), name
    for name, k in DERIVED_ROADS:
        road = message[name]
        assert len(road["marks"]) == started_entries(k, lengths), name
        assert [c["colour"] for c in road["cells"]] == road["marks"]
    asks = message["ask"]
    for name in ROADS:
        banker, player = asks["banker"][name], asks["player"][name]
        assert (banker is None) == (player is None)
        if banker is not None:
            assert {banker, player} == {"red", "blue"}
    assert message["stats"]["hands"] == len(results)
    assert message["stats"]["banker"] + message["stats"]["player"] == len(non_ties)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequences, layouts, st.data())
def test_invariants_and_incremental_equals_scratch(winners, layout, data):
    rows, tail_mode = layout
    results = to_results(winners)
    scoreboard = Scoreboard("s", rows=rows, tail_mode=tail_mode)
    before = scoreboard.message(0)
    checkpoints = set(data.draw(st.lists(st.integers(0, max(len(results) - 1, 0)),
                                         max_size=3)))
    for i, result in enumerate(results):
        scoreboard.append(result)
        after = scoreboard.message(i + 1)
        if result.winner != "tie":  # the ask road predicted exactly the mark added now
            for name in ROADS:
                added = after[name]["marks"][len(before[name]["marks"]):]
                predicted = before["ask"][result.winner][name]
                assert added == ([] if predicted is None else [predicted]), (i, name)
        else:
            assert all(after[name] == before[name] for name in ROADS)
        if i in checkpoints:
            assert after == roads_message(results[:i + 1], seq=i + 1, shoe_id="s", rows=rows,
                                          tail_mode=tail_mode)
        before = after
    final = scoreboard.message(5)
    assert final == roads_message(results, seq=5, shoe_id="s", rows=rows, tail_mode=tail_mode)
    check_board(final, results, rows)
    RoadsMessage.model_validate(final)


@settings(max_examples=60, deadline=None)
@given(sequences, layouts, st.data())
def test_voiding_a_hand_equals_never_dealing_it(winners, layout, data):
    rows, tail_mode = layout
    results = to_results(winners)
    if not results:
        return
    voided = data.draw(st.sets(st.sampled_from([r.hand_no for r in results]), max_size=3))
    scoreboard = Scoreboard("s", rows=rows, tail_mode=tail_mode)
    for result in results:
        scoreboard.append(result)
    for hand_no in voided:
        assert scoreboard.void(hand_no)
    remaining = [r for r in results if r.hand_no not in voided]
    expected = roads_message(remaining, seq=1, shoe_id="s", rows=rows, tail_mode=tail_mode)
    assert scoreboard.message(1) == expected
    check_board(expected, remaining, rows)
    # and the shoe goes on after the void as if the hand had never been dealt
    extra = HandOutcome(10_000, "banker")
    scoreboard.append(extra)
    assert scoreboard.message(2) == roads_message([*remaining, extra], seq=2, shoe_id="s",
                                                  rows=rows, tail_mode=tail_mode)


# --- the feed from the event stream ----------------------------------------------------


def stream(shoe_id: str, winners: str, first_seq: int = 1) -> list[dict]:
    events = [{"type": "shoe_started", "seq": first_seq, "shoe_id": shoe_id, "hand_no": None}]
    for i, c in enumerate(winners.split()):
        seq = first_seq + 1 + 2 * i
        events.append({"type": "card", "seq": seq, "shoe_id": shoe_id, "hand_no": i + 1})
        events.append({"type": "hand_result", "seq": seq + 1, "shoe_id": shoe_id,
                       "hand_no": i + 1, "winner": LETTER[c], "player_pair": False,
                       "banker_pair": i == 1, "player_natural": i == 0,
                       "banker_natural": False})
    return events


def test_feed_follows_the_event_stream_and_ignores_what_it_has_seen():
    from shoed.core.roads import RoadsFeed

    feed = RoadsFeed(rows=6)
    events = stream("T01-1", "B P T P")
    changed = [feed.apply(e) for e in events]
    assert changed == [True, False, True, False, True, False, True, False, True]
    expected = [HandOutcome(1, "banker", natural=True), HandOutcome(2, "player", banker_pair=True),
                HandOutcome(3, "tie"), HandOutcome(4, "player")]
    assert feed.message() == roads_message(expected, seq=9, shoe_id="T01-1")
    assert not any(feed.apply(e) for e in events)  # a replay after a restart: no change
    void = {"type": "hand_voided", "seq": 10, "shoe_id": "T01-1", "hand_no": 2,
            "result_withdrawn": True}
    assert feed.apply(void) and feed.seq == 10
    assert feed.message() == roads_message([expected[0], *expected[2:]], seq=10,
                                           shoe_id="T01-1")
    # a void of a hand with no result leaves the board, with the new seq
    assert feed.apply({**void, "seq": 11, "hand_no": 5})
    assert feed.message()["seq"] == 11 and feed.message()["stats"]["hands"] == 3
    # a snapshot carries the board across a restart
    restored = RoadsFeed.restore(json_round_trip(feed.snapshot()), rows=6)
    assert restored.message() == feed.message()
    # a new shoe starts empty roads
    assert feed.apply({"type": "shoe_started", "seq": 12, "shoe_id": "T01-2", "hand_no": None})
    assert feed.message() == roads_message([], seq=12, shoe_id="T01-2")
    assert feed.apply({"type": "shoe_voided", "seq": 13, "shoe_id": "T01-2"}) is False


def test_feed_takes_event_models():
    from shoed.core.events import HandResultEvent, ShoeStarted
    from shoed.core.roads import RoadsFeed

    feed = RoadsFeed(rows=4, tail_mode="drop")
    assert feed.apply(ShoeStarted(event_id="a", seq=1, instance="i1", ts="t", table_id="T01",
                                  shoe_id="s",
                                  hand_no=None, decks=8, table_type="commission",
                                  unnecessary_cards="burn_then_player",
                                  betting_control="none", trigger="shoe_loaded"))
    assert feed.apply(HandResultEvent(
        event_id="b", seq=2, instance="i1", ts="t", table_id="T01", shoe_id="s", hand_no=1,
        player_cards=["8S", "KD"], banker_cards=["9C", "KC"], player_total=8,
        banker_total=9, winner="banker", player_natural=True, banker_natural=True,
        player_pair=False, banker_pair=False, cards_dealt=4, big_small="small",
        banker_six=False, payouts={}, card_indexes=[1, 2, 3, 4]))
    assert feed.message() == roads_message([HandOutcome(1, "banker", natural=True)], seq=2,
                                           shoe_id="s", rows=4, tail_mode="drop")


def json_round_trip(value: dict) -> dict:
    import json

    return json.loads(json.dumps(value))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.sampled_from("BPT"), st.integers(1, 40)), max_size=80),
       st.integers(0, 5))
def test_feed_equals_the_standing_results_whatever_the_stream(ops, replays):
    """Results and voids (an int: void that hand) in any order, with repeated events."""
    from shoed.core.roads import RoadsFeed

    feed = RoadsFeed(rows=6)
    events: list[dict] = [{"type": "shoe_started", "seq": 1, "shoe_id": "s", "hand_no": None}]
    standing: list[HandOutcome] = []
    hand_no = 0
    for op in ops:
        seq = len(events) + 1
        if isinstance(op, int):
            events.append({"type": "hand_voided", "seq": seq, "shoe_id": "s", "hand_no": op})
            standing = [r for r in standing if r.hand_no != op]
        else:
            hand_no += 1
            events.append({"type": "hand_result", "seq": seq, "shoe_id": "s",
                           "hand_no": hand_no, "winner": LETTER[op], "player_pair": False,
                           "banker_pair": False, "player_natural": False,
                           "banker_natural": False})
            standing.append(HandOutcome(hand_no, LETTER[op]))  # type: ignore[arg-type]
    for i, event in enumerate(events):
        feed.apply(event)
        for earlier in events[max(0, i - replays):i + 1]:  # at-least-once: seen again
            assert not feed.apply(earlier)
    assert feed.message() == roads_message(standing, seq=len(events), shoe_id="s")
