"""A test driver for the dealing engine: a virtual shoe and a supervisor's keyboard."""

from __future__ import annotations

from typing import Any

from shoed.core import commands as cmd
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine, Output
from shoed.core.inputs import (
    CommandInput,
    DeviceFault,
    DeviceGap,
    DeviceHello,
    DeviceItem,
    DeviceShoeLoaded,
    Input,
    Tick,
)
from shoed.core.integrity import DETECTORS, IntegrityThresholds

UNREAD = "??"
CUT = "CUT"
#: The shoe-order watch switched off. The dealing-rule tests deal scripted cards (ten
#: 3C in a row, the same hand again and again) that the watch rightly calls
#: unshuffled; a test of the watch passes `integrity=IntegrityThresholds()` (or its own).
WATCH_OFF = IntegrityThresholds(**dict.fromkeys(DETECTORS, 0))


class Table:
    def __init__(self, **config: Any) -> None:
        config.setdefault("table_id", "T1")
        config.setdefault("integrity", WATCH_OFF)
        self.engine = Engine(EngineConfig(**config), instance_id="i1")
        self.t = 1_800_000_000.0
        self.pull_id = 0
        self.device_index = 0
        self.events: list[Any] = []
        self.inputs: list[Input] = []
        self.requests: list[Any] = []
        self.request_counter = 0

    def feed(self, inp: Input) -> Output:
        self.inputs.append(inp)
        out = self.engine.handle(inp)
        self.events += out.events
        self.requests += out.device
        return out

    def now(self, step: float = 0.5) -> float:
        self.t += step
        return self.t

    def hello(self, boot_id: int = 1, caps: int = 0b11111) -> Output:
        return self.feed(DeviceHello(at=self.now(), boot_id=boot_id, capabilities=caps,
                                     fw_version="1.0", serial_no="SN1"))

    def load(self) -> Output:
        return self.feed(DeviceShoeLoaded(at=self.now()))

    def draw(self, *cards: str, order: list[int] | None = None, size: int | None = None,
             foreign: bool = False) -> list[Output]:
        """One pull of `cards` (upper first). Items go out lowest first unless `order`."""
        self.pull_id += 1
        size = size or len(cards)
        items = []
        for pos, card in enumerate(cards, start=1):
            if card == CUT:
                items.append(DeviceItem(at=0, item="cut", pull_id=self.pull_id, pull_pos=pos,
                                        pull_size=size))
                continue
            self.device_index += 1
            if card == UNREAD:
                items.append(DeviceItem(at=0, item="unread", pull_id=self.pull_id,
                                        pull_pos=pos, pull_size=size,
                                        device_card_index=self.device_index))
            elif foreign:
                items.append(DeviceItem(at=0, item="card", pull_id=self.pull_id, pull_pos=pos,
                                        pull_size=size, device_card_index=self.device_index,
                                        status="foreign", uid=card))
            else:
                items.append(DeviceItem(at=0, item="card", pull_id=self.pull_id, pull_pos=pos,
                                        pull_size=size, device_card_index=self.device_index,
                                        card=card, uid=None))
        sequence = order if order is not None else list(reversed(range(len(items))))
        return [self.feed(items[i].model_copy(update={"at": self.now(0.05)}))
                for i in sequence]

    def cmd(self, name: str, **fields: Any) -> Output:
        self.request_counter += 1
        data = {"request_id": f"r{self.request_counter}", "operator": "sup1",
                "command": name, **fields}
        command = cmd.COMMAND_ADAPTER.validate_python(data)
        return self.feed(CommandInput(at=self.now(), command=command))

    def fault(self, code: int, active: bool) -> Output:
        return self.feed(DeviceFault(at=self.now(), code=code, active=active))

    def gap(self, lost: int = 1) -> Output:
        return self.feed(DeviceGap(at=self.now(), lost=lost))

    def tick(self, seconds: float) -> Output:
        return self.feed(Tick(at=self.now(seconds)))

    # -- reading --------------------------------------------------------------------

    def mark(self) -> int:
        return len(self.events)

    def since(self, mark: int) -> list[Any]:
        return self.events[mark:]

    def types(self, mark: int = 0) -> list[str]:
        return [e.type for e in self.events[mark:]]

    def of(self, kind: str, mark: int = 0) -> list[Any]:
        return [e for e in self.events[mark:] if e.type == kind]

    @property
    def state(self) -> dict[str, Any]:
        return self.engine.public_state()

    def commence(self, first: str = "AS", burns: list[str] | None = None) -> None:
        """Load, draw the commencement card and its burns."""
        self.load()
        self.draw(first)
        count = min("A23456789TJQK".index(first[0]) + 1, 10)
        for card in burns or ["2C"] * count:
            self.draw(card)
