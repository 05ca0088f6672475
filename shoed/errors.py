"""shoed's exceptions, in one tree (as python-can's ``exceptions.py`` keeps its own)::

    ShoedError                      shoed.core.errors: the base of every error of ours
     ├── CardNotationError          core: a card string that is not rank + suit
     ├── RulesError                 core: a hand the drawing rules cannot accept
     ├── ConfigError                config: a key with a value that cannot be used
     ├── StorageError               store.statedir: the journal cannot be read or written
     │    ├── JournalDamaged        the journal is damaged, missing or foreign: no fresh start
     │    └── JournalInUse          another daemon holds the state directory's lock
     ├── TransportLost              device: the shoe went away (unplugged, pty closed, I/O)
     ├── BrokerError                mqtt: the broker cannot be used
     │    ├── NotABroker            mqtt.url answers, but not as an MQTT broker
     │    ├── PublishRefused        mqtt: the broker answered a PUBLISH with a failure
     │    └── RootTaken             mqtt.claim: another live daemon publishes under the root
     │         └── SessionTakenOver the broker gave this daemon's MQTT session to another
     └── SupervisionFailed          daemon: a task that could not be kept running

Every message names what was expected and what was found. The classes live where they
are raised (the cores may not import the shell); this module is where to find them all
(RootTaken and SessionTakenOver from shoed.mqtt.claim, which imports this module). Not in
this tree: the integrators' library's own (shoed.client.errors: ShoedClientError), the
wire protocol's (firmware_protocol.errors), and the console's option error
(shoed.console.server.ConsoleError, a ValueError).
"""

from __future__ import annotations

from shoed.config import ConfigError
from shoed.core.errors import CardNotationError, RulesError, ShoedError
from shoed.store.statedir import JournalDamaged, JournalInUse, StorageError


class TransportLost(ShoedError):
    """The device went away (unplugged, pty closed, I/O error)."""


class BrokerError(ShoedError):
    """The MQTT broker cannot be used (refused, unreachable, timed out)."""


class NotABroker(BrokerError):
    """Something answers at mqtt.url, but not as an MQTT broker (no CONNACK, or bytes
    that are not MQTT)."""


class PublishRefused(BrokerError):
    """The broker answered a QoS 1 PUBLISH with a PUBACK whose reason is a failure (MQTT 5
    section 3.4.2.1: 0x87 Not authorized, 0x97 Quota exceeded, ...). The message is not
    delivered: an event stays in the outbox."""

    def __init__(self, topic: str, reason: str, code: int) -> None:
        super().__init__(f"the broker refused a message on {topic}: {reason} "
                         f"(PUBACK reason 0x{code:02X})")
        self.topic, self.reason, self.code = topic, reason, code


class SupervisionFailed(ShoedError):
    """A long-lived task failed again and again and could not be kept running."""


__all__ = ["BrokerError", "CardNotationError", "ConfigError", "JournalDamaged", "JournalInUse",
           "NotABroker", "PublishRefused", "RulesError", "ShoedError", "StorageError",
           "SupervisionFailed", "TransportLost"]
