"""Print one real example of each event type, produced by the engine (for the README)."""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from table import CUT, UNREAD, Table

from shoed.core.cards import ALL_CARDS
from shoed.core.integrity import IntegrityThresholds


def main() -> None:
    t = Table(table_id="T01", betting_control="commands")
    t.hello()
    t.commence("AS", ["2C"])
    t.cmd("close_betting", hand_no=1)
    t.draw("9S")
    t.draw("2S", "TH", order=[1, 0])
    t.draw(UNREAD)
    t.cmd("manual_card", card_index=6, card="5D")
    t.draw("6C")
    t.draw("8H")  # surplus during betting: next burn
    t.draw(CUT)
    t.cmd("void_hand", hand_no=1, reason="missed burn")
    t.cmd("new_shoe", force=False)
    t.cmd("void_shoe", reason="marked cards")
    seen: dict[str, dict] = {}
    for event in t.events:
        seen.setdefault(f"`{event.type}`", event.model_dump())
    # The shoe-order watch on a pack in new-deck order (integrity.md section 2).
    w = Table(table_id="T01", betting_control="none", integrity=IntegrityThresholds())
    w.hello()
    w.load()
    for card in ALL_CARDS[:6]:
        w.draw(card)
    for event in w.events:
        if event.type == "alarm":
            seen.setdefault(f"`alarm` (`{event.code}`, the shoe-order watch)",
                            event.model_dump())
    for kind, body in seen.items():
        print(f"{kind}:\n```json\n{json.dumps(body)}\n```")


if __name__ == "__main__":
    main()
