"""The brokers of `mqtt.url`, and which one each connection attempt goes to.

`mqtt.url` is one broker or a list of them (an HA pair, or the members of a cluster).
An attempt goes to the first that answers, in the configured order. When the one in use
drops the connection, a new round starts: the list in its order without the one that
dropped, then that one last. Within a round a failed attempt goes on to the next broker
at once; after a whole round failed (or after a drop), the caller waits its back-off. No
fail-back: the daemon stays on a broker that works; a later drop starts from the top.

No I/O here: the URL parse, the order and the choice (the shell connects).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class BrokerUrl:
    url: str
    host: str
    port: int
    tls: bool

    @property
    def host_port(self) -> tuple[str, int]:
        return self.host, self.port


def parse_broker_url(text: str) -> BrokerUrl:
    """`mqtt://host[:port][/]` or `mqtts://...`; ValueError saying what is wrong."""
    value = text.strip()
    if "://" not in value:
        raise ValueError(f"{text!r} is not a broker URL: expected mqtt://HOST[:PORT] "
                         f"or mqtts://HOST[:PORT]")
    scheme = value.split("://", 1)[0].lower()
    if scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"{text!r}: the scheme must be mqtt:// or mqtts://, "
                         f"not {scheme}://")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as error:
        raise ValueError(f"{text!r}: bad port ({error})") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{text!r}: no credentials in the URL (mqtt.username, "
                         f"mqtt.password_file)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{text!r}: a broker URL has no path, query or fragment")
    host = parts.hostname
    if not host or any(c in host for c in " ,\t"):
        raise ValueError(f"{text!r}: no host name")
    if port == 0:
        raise ValueError(f"{text!r}: port 0 is not a broker's port")
    tls = scheme == "mqtts"
    return BrokerUrl(url=value, host=host, port=port or (8883 if tls else 1883), tls=tls)


def split_urls(value: str | Sequence[str]) -> list[str]:
    """The entries of `mqtt.url`: a list, or a string of comma-separated URLs."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items]


class BrokerList:
    """Which broker the next connection attempt goes to."""

    def __init__(self, brokers: Sequence[BrokerUrl]) -> None:
        if not brokers:
            raise ValueError("at least one broker")
        for n, broker in enumerate(brokers):  # mqtt.url's and --url's rule alike
            if broker.host_port in {b.host_port for b in brokers[:n]}:
                raise ValueError(f"entry {n + 1} ({broker.url!r}) names a broker listed "
                                 f"before")
        self.brokers = tuple(brokers)
        self._round: list[BrokerUrl] = list(self.brokers)
        self._tried = 0  # attempts made in this round
        self.in_use: BrokerUrl | None = None  # connected to it now

    @classmethod
    def of(cls, urls: Sequence[str]) -> BrokerList:
        return cls([parse_broker_url(url) for url in urls])

    @property
    def current(self) -> BrokerUrl:
        """The broker the connection attempt goes (or went) to."""
        return self._round[self._tried % len(self._round)]

    @property
    def round(self) -> list[str]:
        """The order of this round, the current one first (for logs and tests)."""
        i = self._tried % len(self._round)
        return [b.url for b in self._round[i:] + self._round[:i]]

    def connected(self) -> None:
        self.in_use = self.current

    def advance(self, was_connected: bool) -> bool:
        """The attempt on `current` ended (it was connected, then dropped; or it failed):
        move to the next broker. True when the caller should wait its back-off first (a
        round is over, or the connection dropped); False to try the next one at once."""
        self.in_use = None
        dropped = self.current
        if was_connected:
            self._round = [b for b in self.brokers if b != dropped] + [dropped]
            self._tried = 0
            return True
        self._tried += 1
        if self._tried < len(self._round):
            return False
        self._round = list(self.brokers)
        self._tried = 0
        return True


def refused_subscription(granted: Sequence[object]) -> str | None:
    """What a SUBACK refused, or None: `granted` is what aiomqtt's ``subscribe`` returns
    (paho's ReasonCodes, or ints from an older paho). A reason of 0x80 or more is a
    refusal (MQTT 5 section 3.9.3: 0x87 Not authorized, ...; 3.1.1: 0x80 Failure).
    Mosquitto grants a subscription its ACL does not let the user read and then delivers
    nothing; other brokers (RabbitMQ, NATS, EMQX) refuse it here."""
    for code in granted:
        value = code if isinstance(code, int) else getattr(code, "value", 0)
        if isinstance(value, int) and value >= 0x80:
            name = "" if isinstance(code, int) else f"{code} "
            return f"{name}(SUBACK reason 0x{value:02X})"
    return None


def connect_failure(url: str, error: Exception, timeout: float,
                    answered_before: bool = False) -> Exception:
    """What a failed connect to `url` means: unreachable (the socket's error), or
    something that is not an MQTT broker (no CONNACK within `timeout`, or bytes that are
    not MQTT), unless it `answered_before` as a broker: then it is a broker that hangs.
    `error` is the MQTT client's (aiomqtt's MqttError)."""
    # Here, not at the top: shoed.errors imports shoed.config, which imports this module.
    from shoed.errors import BrokerError, NotABroker

    text = str(error)
    if text == "timed out":  # the socket's connect (aiomqtt passes its OSError on)
        return BrokerError(f"mqtt.url {url}: the connection was not answered in "
                           "time: the host is off or unreachable, or a firewall drops it")
    if "timed out" in text and answered_before:
        return BrokerError(f"mqtt.url {url} accepted the connection but sent no MQTT "
                           f"CONNACK within {timeout:g} s; it answered as a broker "
                           f"before: it hangs or is overloaded")
    if "timed out" in text:  # aiomqtt's wait for the CONNACK
        return NotABroker(f"mqtt.url {url} accepted the connection but sent no "
                          f"MQTT CONNACK within {timeout:g} s: is it an MQTT broker?")
    if text.startswith("[Errno") or "SSL" in text or "certificate" in text:
        return error  # refused, unreachable, TLS: the message says which
    return NotABroker(f"mqtt.url {url} did not answer as an MQTT broker: {text}")
