"""Configuration (mqtt-api.md section 5): one TOML file plus SHOED_<SECTION>__<KEY> overrides.

Environment variables win over the file. Every error names the key and the bad value.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import re
import ssl
import stat
import tomllib
import unicodedata
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError

from .core.cards import parse_card
from .core.commands import ROLES, ParseLimits, Role
from .core.errors import CardNotationError, ShoedError
from .core.integrity import IntegrityThresholds
from .core.paytable import EZ_SIDE_BETS, SIDE_BETS, PayTable, SideBet
from .mqtt.brokers import BrokerList, BrokerUrl, parse_broker_url, split_urls


class ConfigError(ShoedError):
    """A configuration that cannot be used; the message names the key and the value."""


MQTT_STRING_MAX = 65535  # bytes of UTF-8: an MQTT string's (and password's) 2-byte length


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any, info: ValidationInfo) -> Any:
        """A number is not TOML's true/false: pydantic's lax int and float read them as 1
        and 0 (`rules.decks = true` was one deck; a pay of true, a table that pays what
        nobody wrote). A number in a string stays accepted: the environment gives every
        value as a string."""
        kind = cls.model_fields[str(info.field_name)].annotation
        if isinstance(value, bool) and {int, float} & {kind, *get_args(kind)}:
            raise ValueError(f"expected a number, not {str(value).lower()}")
        return value


class TableSection(Section):
    id: str = Field(default="T01", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    betting_control: Literal["commands", "none"] = "commands"


class DeviceSection(Section):
    transport: Literal["serial", "usb"] = "serial"
    port: str = "/dev/shoe"
    baudrate: int = Field(default=115200, ge=1200, le=4_000_000)
    vid: int = Field(default=0x1209, ge=0, le=0xFFFF)
    pid: int = Field(default=0xBAC0, ge=0, le=0xFFFF)
    serial_no: str | None = None
    reconnect_max_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("vid", "pid", mode="before")
    @classmethod
    def _hex(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return int(value, 0)
            except ValueError as error:
                raise ValueError(f"expected a number like 0x1209, got {value!r}") from error
        return value


class MqttSection(Section):
    # One broker, or a list to fail over between (TOML list, or comma-separated).
    url: str | list[str] = "mqtt://127.0.0.1:1883"
    topic_prefix: str | None = None
    username: str | None = None
    password_file: pathlib.Path | None = None
    ca_file: pathlib.Path | None = None
    cert_file: pathlib.Path | None = None
    key_file: pathlib.Path | None = None
    client_id: str | None = None  # at most 65,000 bytes: room for `-replay-<8 hex>`
    protocol: Literal["5", "3.1.1"] = "5"
    keepalive: int = Field(default=30, ge=5, le=600)
    publish_timeout_s: float = Field(default=10.0, gt=0, le=120)

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = topic_prefix_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("username", "client_id")
    @classmethod
    def _mqtt_string(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The side connections' client ids add `-replay-<8 hex>` or `-probe-<8 hex>`.
        most = MQTT_STRING_MAX if info.field_name == "username" else 65_000
        if value is not None and len(value.encode()) > most:
            raise ValueError(f"at most {most:,} bytes of UTF-8 (an MQTT string holds 65,535), "
                             f"got {len(value.encode()):,}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | list[str]) -> str | list[str]:
        entries = split_urls(value)
        if not entries:
            raise ValueError("expected at least one broker URL")
        parsed: list[BrokerUrl] = []
        for n, entry in enumerate(entries, start=1):
            where = f"entry {n} of {len(entries)}: " if len(entries) > 1 else ""
            if not entry:
                raise ValueError(f"{where}empty (a stray comma?)")
            try:
                parsed.append(parse_broker_url(entry))
            except ValueError as error:
                raise ValueError(f"{where}{error}") from None
        BrokerList(parsed)  # refuses a broker listed twice, as `tail --url` does
        if len({b.tls for b in parsed}) > 1:
            plain = ", ".join(b.url for b in parsed if not b.tls)
            raise ValueError(f"mixes mqtts:// and mqtt:// ({plain} without TLS): every "
                             f"broker of the list must use TLS, or none (one ca_file, "
                             f"cert_file and key_file serve them all)")
        # One broker stays a string (as it always was); several are a list.
        return entries if len(entries) > 1 else entries[0]

    @property
    def urls(self) -> list[str]:
        """Every broker of `url`, in the configured order (the first is the primary)."""
        return split_urls(self.url)

    @property
    def brokers(self) -> list[BrokerUrl]:
        return [parse_broker_url(url) for url in self.urls]

    @property
    def tls(self) -> bool:
        """The brokers' TLS (all of them agree: checked at load)."""
        return self.brokers[0].tls

    def client_auth(self) -> dict[str, Any]:
        """aiomqtt.Client's credential and TLS arguments for this broker configuration (the
        password read from its file, never logged; the TLS context as check_tls_files
        loads it)."""
        args: dict[str, Any] = {}
        if self.username:
            args["username"] = self.username
        if self.password_file:
            try:
                args["password"] = mqtt_password(self.password_file)
            except ConfigError as error:  # spoilt since the start: the connect retries
                raise OSError(str(error)) from error
        if self.tls:
            context = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file else None)
            if self.cert_file:
                context.load_cert_chain(str(self.cert_file),
                                        str(self.key_file) if self.key_file else None)
            args["tls_context"] = context
        return args

    @property
    def host_port(self) -> tuple[str, int]:
        """The first broker's host and port (tools that use one broker use this one)."""
        return self.brokers[0].host_port


def topic_prefix_problem(value: str) -> str | None:
    """Why `value` cannot be the root of every topic the daemon publishes, or None.

    A root with a wildcard is not a topic one can publish to, an empty level or a slash at
    either end makes topics no consumer subscribes to by accident, and `$` topics belong to
    the broker: the daemon would never connect or never be heard.
    """
    if not value:
        return "must not be empty (leave it out for shoed/<table.id>)"
    if "#" in value or "+" in value:
        return "must not contain the MQTT wildcards '#' or '+'"
    odd = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if odd:  # a broker may drop the connection; no operator could type or see them
        return (f"must not contain control or format characters (Unicode Cc, Cf, Zl, Zp: "
                f"a tab, a line break, U+0085, U+2028, a BOM), got U+{ord(odd[0]):04X}")
    if any(level != level.strip() for level in value.split("/")):
        # Legal MQTT, but a stray space is a typo that no ACL or subscriber matches.
        return "must not have a level that starts or ends with a space"
    if value.startswith("/") or value.endswith("/"):
        return "must not start or end with '/'"
    if "//" in value:
        return "must not contain an empty level ('//')"
    if value.startswith("$"):
        return "must not start with '$' (topics reserved for the broker)"
    if len(value.encode()) > 1024:
        return "must be at most 1024 bytes"
    return None


PayFigure = float  # not true/false: Section._not_a_bool


class PayoutsSection(Section):
    banker: PayFigure | None = Field(default=None, ge=0, le=100)
    banker_six: PayFigure | None = Field(default=None, ge=0, le=100)
    player: PayFigure = Field(default=1.0, ge=0, le=100)
    tie: PayFigure = Field(default=8.0, ge=0, le=1000)
    pair: PayFigure = Field(default=11.0, ge=0, le=1000)
    big: PayFigure = Field(default=0.54, ge=0, le=100)
    small: PayFigure = Field(default=1.5, ge=0, le=100)
    #: a banker win with exactly three cards totalling 7 (unset: as banker; ez: 0, a push)
    banker_three_card_seven: PayFigure | None = Field(default=None, ge=0, le=100)


# --- side bets: [rules.side_bets.<bet>], a named preset and any figure overridden ------

# Net units per unit staked, as every figure: 0 returns the stake (a push), and -1 loses it,
# for a house that does not pay an outcome its preset pays (e.g. a Dragon Bonus whose
# natural tie loses; decisions.md 182).
Pay = Field(default=None, ge=-1, le=10_000)


class SideBetSection(Section):
    """A side bet the table offers (present: offered, unless `enabled = false`)."""

    enabled: bool = True
    preset: str = ""  # each bet narrows this to its own presets

    def figures(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump(exclude={"enabled", "preset"}).items()
                if v is not None}


class Dragon7Section(SideBetSection):
    preset: Literal["standard"] = "standard"
    win: PayFigure | None = Pay


class Panda8Section(SideBetSection):
    preset: Literal["standard"] = "standard"
    win: PayFigure | None = Pay


class DragonBonusSection(SideBetSection):
    preset: Literal["standard"] = "standard"
    natural_win: PayFigure | None = Pay
    natural_tie: PayFigure | None = Pay
    win_by_9: PayFigure | None = Pay
    win_by_8: PayFigure | None = Pay
    win_by_7: PayFigure | None = Pay
    win_by_6: PayFigure | None = Pay
    win_by_5: PayFigure | None = Pay
    win_by_4: PayFigure | None = Pay


class Lucky6Section(SideBetSection):
    preset: Literal["12/20", "12/23"] = "12/20"
    two_cards: PayFigure | None = Pay
    three_cards: PayFigure | None = Pay


class PerfectPairSection(SideBetSection):
    preset: Literal["either_25", "one_25_both_250"] = "either_25"
    one: PayFigure | None = Pay
    both: PayFigure | None = Pay


class EitherPairSection(SideBetSection):
    preset: Literal["standard"] = "standard"
    win: PayFigure | None = Pay


class SideBetsSection(Section):
    dragon7: Dragon7Section | None = None
    panda8: Panda8Section | None = None
    dragon_bonus_player: DragonBonusSection | None = None
    dragon_bonus_banker: DragonBonusSection | None = None
    lucky6: Lucky6Section | None = None
    perfect_pair: PerfectPairSection | None = None
    either_pair: EitherPairSection | None = None


class RulesSection(Section):
    decks: int = Field(default=8, ge=1, le=12)
    table_type: Literal["commission", "super6", "ez"] = "commission"
    unnecessary_cards: Literal["burn_then_player", "burn_then_void"] = "burn_then_player"
    payouts: PayoutsSection = Field(default_factory=PayoutsSection)
    side_bets: SideBetsSection = Field(default_factory=SideBetsSection)

    def paytable(self, disabled: bool = False) -> PayTable:
        """The pay table; `disabled`: with the side bets `enabled = false` keeps aside
        (`analyze --side-bets NAME` analyses a bet at its configured figures)."""
        figures = self.payouts.model_dump(exclude_none=True)
        table = PayTable.default(self.table_type, **figures)
        offered: list[SideBet] = []
        for bet in SIDE_BETS:
            section: SideBetSection | None = getattr(self.side_bets, bet)
            if section is None:
                if self.table_type == "ez" and bet in EZ_SIDE_BETS:
                    offered.append(SideBet.preset(bet))  # an EZ table's own side bets
            elif section.enabled or disabled:
                offered.append(SideBet.preset(bet, section.preset, section.figures()))
        return dataclasses.replace(table, side_bets=tuple(offered))


class IntegritySection(IntegrityThresholds):
    """[integrity] (integrity.md): one threshold per detector (0 disables it)."""

    #: "hold": shoe_unshuffled holds the game (dealing-rules.md rule 10); "alarm": it
    #: only raises the alarm, cleared by ack_alarm, void_shoe or the shoe's end
    on_unshuffled: Literal["hold", "alarm"] = "hold"

    def thresholds(self) -> IntegrityThresholds:
        return IntegrityThresholds(**self.model_dump(exclude={"on_unshuffled"}))


class CardsSection(Section):
    manifest: pathlib.Path | None = None
    min_quality: int = Field(default=0, ge=0, le=100)


class StateSection(Section):
    dir: pathlib.Path = pathlib.Path("/var/lib/shoed")
    retention_days: int = Field(default=30, ge=1, le=3650)
    snapshot_every: int = Field(default=64, ge=1, le=100_000)
    # Only when the journal is damaged or foreign: move it aside, start a new one.
    new_journal: bool = False

    @field_validator("dir", mode="before")
    @classmethod
    def _dir(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # pathlib would make it "."
            raise ValueError("must not be empty (the journal's directory)")
        return value


class AuthSection(Section):
    """Broker users mapped to roles (mqtt-api.md section 4). Mosquitto's ACL file has no
    groups, so the mapping lives here; a user not listed gets `default_role`."""

    roles: dict[str, Role] = Field(default_factory=dict)
    default_role: Role | None = None  # None: a user not listed may only use `whoami`
    bare_topic_role: Role = "supervisor"  # the sender `anonymous` on `{root}/cmd`

    @field_validator("roles")
    @classmethod
    def _users(cls, value: dict[str, Role]) -> dict[str, Role]:
        for user in value:
            if not user or any(c in user for c in "+#/") or user == "anonymous":
                raise ValueError(f"expected broker user names without + # /, got {user!r} "
                                 f"(roles: {', '.join(ROLES)})")
        return value


class CommandsSection(Section):
    """Limits on what a command payload may hold (anything beyond is refused)."""

    max_bytes: int = Field(default=16 * 1024, ge=256, le=1024 * 1024)
    max_string: int = Field(default=1000, ge=16, le=100_000)
    max_fields: int = Field(default=32, ge=4, le=1000)
    request_id_memory_h: float = Field(default=24.0, ge=24.0, le=24.0 * 365)
    # Under MQTT 3.1.1 there is no packet limit in CONNACK: this one is used instead.
    max_packet_size: int = Field(default=256 * 1024, ge=4096, le=268_435_455)

    def limits(self) -> ParseLimits:
        return ParseLimits(max_bytes=self.max_bytes, max_string=self.max_string,
                           max_fields=self.max_fields)


class ReplaySection(Section):
    max_events: int = Field(default=1000, ge=1, le=100_000)  # per `replay` answer


class LogSection(Section):
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


class DaemonSection(Section):
    """How `shoed run` runs (docs/decisions.md 139)."""

    # asyncio: the standard library's event loop. uvloop: libuv's (C): a little less CPU
    # a card, a slower big `replay` (docs/decisions.md 139); not installed: asyncio, said
    # in the log.
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"


class RoadsSection(Section):
    """The scoreboard (roads.md): grid height and what a dragon tail does."""

    rows: int = Field(default=6, ge=3, le=12)
    tail_mode: Literal["stay", "drop"] = "stay"
class ConsoleSection(Section):
    """`shoed console`: the web page's server, and what the page is told (docs/console.md)."""

    listen: str = "127.0.0.1:8080"  # HOST:PORT, [IPv6]:PORT; port 0: any free one
    # The broker's MQTT-over-WebSockets listener, as the browser reaches it. Default: the
    # host of mqtt.url, port 9001, wss:// when mqtt.url is mqtts://.
    ws_url: str | None = Field(default=None, pattern=r"^wss?://[^/\s]+(/\S*)?$")
    tables: list[str] = Field(default_factory=list)  # the pit page's tables; [] = table.id
    # The topic root of another table of the pit (this table's root is its own).
    topic_template: str = "shoed/{table}"
    whoami_timeout_s: float = Field(default=3.0, gt=0, le=60)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if problem := listen_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: list[str]) -> list[str]:
        if problem := tables_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("topic_template")
    @classmethod
    def _template(cls, value: str) -> str:
        root = value.replace("{table}", "T01").rstrip("/")  # as the page's roots are made
        problem = ("must contain {table}" if "{table}" not in value else
                   "has a { or } that is not {table}" if {"{", "}"} & set(root) else
                   topic_prefix_problem(root))
        if problem:
            raise ValueError(f"{problem} (a table T01's root would be {root!r})")
        return value


def listen_problem(text: str) -> str | None:
    """Why `text` is no HOST:PORT to serve on (console.listen, `console --listen`), or
    None. An IPv6 address is written in brackets: [::1]:8080."""
    host, _, port = text.rpartition(":")
    bare = host[1:-1] if host[:1] + host[-1:] == "[]" else host
    if not bare or not (port.isascii() and port.isdigit()) or \
            any(c.isspace() or c in "[]" for c in bare):
        return ("expected HOST:PORT like 127.0.0.1:8080 or [::1]:8080 (port 0 to 65535; "
                "0: any free port)")
    if int(port) > 65535:
        return f"the port must be 0 (any free one) to 65535, got {port}"
    return None


def tables_problem(tables: list[str]) -> str | None:
    """Why `tables` is no list of the pit page's tables (console.tables, `--tables`)."""
    for table in tables:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", table):
            return f"{table!r} is not a table id (letters, digits, '_', '.', '-'; at most 64)"
    if twice := sorted({t for t in tables if tables.count(t) > 1}):
        return f"a table is listed twice: {', '.join(twice)}"
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOED_", env_nested_delimiter="__",
                                      extra="forbid")

    table: TableSection = Field(default_factory=TableSection)
    device: DeviceSection = Field(default_factory=DeviceSection)
    mqtt: MqttSection = Field(default_factory=MqttSection)
    rules: RulesSection = Field(default_factory=RulesSection)
    cards: CardsSection = Field(default_factory=CardsSection)
    state: StateSection = Field(default_factory=StateSection)
    integrity: IntegritySection = Field(default_factory=IntegritySection)
    log: LogSection = Field(default_factory=LogSection)
    roads: RoadsSection = Field(default_factory=RoadsSection)
    auth: AuthSection = Field(default_factory=AuthSection)
    commands: CommandsSection = Field(default_factory=CommandsSection)
    replay: ReplaySection = Field(default_factory=ReplaySection)
    daemon: DaemonSection = Field(default_factory=DaemonSection)

    def role_of(self, sender: str) -> Role | None:
        """The role of a command's sender (`anonymous`: the bare `{root}/cmd`)."""
        if sender == "anonymous":
            return self.auth.bare_topic_role
        return self.auth.roles.get(sender, self.auth.default_role)
    console: ConsoleSection = Field(default_factory=ConsoleSection)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = os.environ.get("_SHOED_CONFIG_FILE")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file,
                                                    deep_merge=True))
        return tuple(sources)

    @property
    def topic_root(self) -> str:
        return (self.mqtt.topic_prefix or f"shoed/{self.table.id}").rstrip("/")


def describe_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"])
        shown = item.get("input")
        value = "" if isinstance(shown, dict) else f" (got {shown!r})"
        if len(value) > 200:  # one line: a value of 65,001 bytes is not shown whole
            value = f"{value[:80]}... ({len(str(shown)):,} characters))"
        lines.append(f"{key}: {item['msg']}{value}")
    return "; ".join(lines)


def load_settings(path: str | os.PathLike[str] | None, *, files: bool = True) -> Settings:
    """Read the TOML file (if any) and the environment; raise ConfigError naming the key.

    `files=False`: the files the settings name (mqtt's password, CA, certificate and key,
    cards.manifest) are not checked nor read: for a command that uses none of them (`shoed
    analyze` reads the pay table of a production config, whose secrets its user may not
    be able to read, or which is a copy without them)."""
    if path is not None:
        file = pathlib.Path(path)
        require_readable_file(file, "config file")
        refuse_if_others_can(file, write=True, what="config file")
        try:
            tomllib.loads(file.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"config file {file}: not valid TOML: {error}") from error
        except OSError as error:
            raise ConfigError(f"config file {file}: cannot read it: "
                              f"{error.strerror or error}") from error
        os.environ["_SHOED_CONFIG_FILE"] = str(file)
    else:
        os.environ.pop("_SHOED_CONFIG_FILE", None)
    from .config_env import check_environment, env_not_json

    check_environment(Settings)
    try:
        settings = Settings()
    except ValidationError as error:
        raise ConfigError(f"invalid configuration: {describe_errors(error)}") from error
    except SettingsError as error:
        raise ConfigError(f"invalid configuration: {env_not_json(error)}") from error
    finally:
        os.environ.pop("_SHOED_CONFIG_FILE", None)
    if not files:
        return settings
    for key in ("password_file", "ca_file", "cert_file", "key_file"):
        file = getattr(settings.mqtt, key)
        if file is not None:
            require_readable_file(file, f"mqtt.{key}")
    if settings.mqtt.password_file is not None:
        refuse_if_others_can(settings.mqtt.password_file, write=True, read=True,
                             what="mqtt.password_file")
        mqtt_password(settings.mqtt.password_file)
    check_tls_files(settings.mqtt)
    if settings.cards.manifest is not None:
        require_readable_file(settings.cards.manifest, "cards.manifest")
    if settings.cards.manifest is not None:
        load_manifest(settings.cards.manifest)
    return settings


def check_device_port(device: DeviceSection) -> None:
    """Refuse a serial port the transport could never open (an empty one, an unknown
    `scheme://`), naming the key and the forms it takes. Called by `shoed run` and
    `check-config` only, not on DeviceSection nor by the loader: the other commands
    (`roads`, `console`, `analyze`, `demo`) never open the device, and tests and the
    simulator build settings with an empty port and a transport of their own."""
    if device.transport != "serial":
        return  # a USB shoe is found by vid/pid; its port is not used
    from .device.transports import SERIAL_PORT_FORMS, serial_port_problem

    problem = serial_port_problem(device.port)
    if problem is not None:
        raise ConfigError(f"device.port: {device.port!r} {problem}; expected "
                          f"{SERIAL_PORT_FORMS}")


def check_tls_files(mqtt: MqttSection) -> None:
    """Load the TLS files as the daemon will (a CA bundle, a certificate with its key), so
    a file that is not PEM, or a key that does not fit its certificate, is named now and
    not in an endless reconnect later. TLS files with a plain `mqtt://` URL are refused:
    they would be silently unused."""
    files = {key: getattr(mqtt, key) for key in ("ca_file", "cert_file", "key_file")}
    given = [key for key, file in files.items() if file is not None]
    if given and not mqtt.tls:
        raise ConfigError(f"mqtt.{given[0]}: set, but mqtt.url is {mqtt.url!r}: TLS files "
                          "are used only with an mqtts:// URL")
    if mqtt.key_file is not None and mqtt.cert_file is None:
        raise ConfigError("mqtt.key_file: set without mqtt.cert_file (the key belongs to a "
                          "client certificate)")
    if mqtt.ca_file is None and mqtt.cert_file is None:
        return  # nothing to load (the system's CAs are read at the connect, after READY)
    try:
        tls_context(mqtt.ca_file, mqtt.cert_file, mqtt.key_file)
    except TlsFileError as error:
        if error.which == "ca":
            raise ConfigError(f"mqtt.ca_file: {mqtt.ca_file} is not a PEM certificate "
                              f"bundle ({error.cause})") from error
        key = "mqtt.cert_file" if mqtt.key_file is None else "mqtt.cert_file/key_file"
        raise ConfigError(f"{key}: {mqtt.cert_file} (key {mqtt.key_file or 'in it'}) "
                          f"cannot be loaded: not PEM, or the key does not fit the "
                          f"certificate ({error.cause})") from error


class TlsFileError(Exception):
    """A TLS file that cannot be loaded: `which` is "ca" or "cert" (with its key)."""

    def __init__(self, which: str, cause: Exception) -> None:
        super().__init__(f"{which}: {cause}")
        self.which, self.cause = which, cause


def tls_context(ca_file: pathlib.Path | None, cert_file: pathlib.Path | None,
                key_file: pathlib.Path | None) -> ssl.SSLContext:
    """A client's TLS context with these files loaded, as the daemon and the clients
    load them; raises TlsFileError naming the file that cannot be used."""
    context = ssl.create_default_context()
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except (ssl.SSLError, ValueError) as error:
            raise TlsFileError("ca", error) from error
    if cert_file is not None:
        try:
            context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        except ssl.SSLError as error:
            raise TlsFileError("cert", error) from error
    return context


def require_readable_file(path: pathlib.Path, key: str) -> None:
    """Refuse, naming the key and the file, a path that is not a file this process can read."""
    try:
        if not path.exists():
            raise ConfigError(f"{key}: {path} does not exist")
        if path.is_dir():
            raise ConfigError(f"{key}: {path} is a directory, not a file")
        if not path.is_file():
            raise ConfigError(f"{key}: {path} is not a file")
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as error:  # e.g. in a directory this user may not enter
        raise ConfigError(f"{key}: cannot read {path}: {error.strerror or error} (as user "
                          f"{user_name()})") from error


def user_name() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, OSError):
        return str(os.geteuid())


def dump_toml(sections: dict[str, dict[str, Any]]) -> str:
    """Render a config (sections of scalar keys) as TOML, e.g. for a test or a bench.

    Nested tables are given by dotted section names (``"rules.payouts"``).
    """
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if isinstance(value, list | tuple):
                rendered = json.dumps([str(item) for item in value])  # a list of strings
            elif isinstance(value, bool):
                rendered = "true" if value else "false"
            elif isinstance(value, int | float):
                rendered = repr(value)
            else:
                rendered = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
            bare = re.fullmatch(r"[A-Za-z0-9_-]+", key)
            lines.append(f"{key if bare else json.dumps(key)} = {rendered}")
        lines.append("")
    return "\n".join(lines)


def write_config(path: pathlib.Path, sections: dict[str, dict[str, Any]]) -> pathlib.Path:
    """Write `sections` as a TOML config file readable only by its owner's group."""
    path.write_text(dump_toml(sections))
    path.chmod(0o640)
    return path


def refuse_if_others_can(path: pathlib.Path, *, what: str, write: bool = False,
                         read: bool = False) -> None:
    """Refuse a file that any user may change (or, for secrets, read)."""
    mode = path.stat().st_mode
    if write and mode & stat.S_IWOTH:
        raise ConfigError(f"{what} {path} is world-writable (mode {stat.filemode(mode)}): "
                          f"refusing to start; chmod o-w it")
    if read and mode & stat.S_IROTH:
        raise ConfigError(f"{what} {path} is world-readable (mode {stat.filemode(mode)}): "
                          f"refusing to start; chmod o-r it")


def mqtt_password(path: pathlib.Path) -> str:
    """The broker password in `path` (its text, stripped); ConfigError naming
    mqtt.password_file if it cannot be read or MQTT cannot carry it."""
    try:
        password = path.read_bytes().decode().strip()
    except OSError as error:
        raise ConfigError(f"mqtt.password_file: cannot read {path}: "
                          f"{error.strerror or error}") from error
    except UnicodeDecodeError:
        raise ConfigError(f"mqtt.password_file {path}: not UTF-8 text") from None
    if (size := len(password.encode())) > MQTT_STRING_MAX:
        raise ConfigError(f"mqtt.password_file {path}: {size:,} bytes, over MQTT's "
                          f"{MQTT_STRING_MAX:,}")
    return password


def load_manifest(path: pathlib.Path) -> dict[str, str]:
    """The RFID deck manifest: CSV `uid,card`; a UID listed twice makes it invalid."""
    try:
        data = path.read_bytes()
        text = data.decode()
    except OSError as error:
        raise ConfigError(f"cards.manifest: cannot read {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"cards.manifest {path} line {data[:error.start].count(10) + 1}: "
                          f"not UTF-8 text (byte {data[error.start]:#04x})") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip().lower() for c in rows[0]] != ["uid", "card"]:
        raise ConfigError(f"cards.manifest {path}: expected the header 'uid,card', "
                          f"got {','.join(rows[0]) if rows else 'an empty file'!r}")
    manifest: dict[str, str] = {}
    for line_no, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 2:
            raise ConfigError(f"cards.manifest {path} line {line_no}: expected 2 columns, "
                              f"got {len(row)}")
        uid = row[0].strip().upper()
        if not re.fullmatch(r"([0-9A-F]{2})+", uid):  # as the shoe's UID is looked up
            raise ConfigError(f"cards.manifest {path} line {line_no}: UID must be hex digits "
                              f"in pairs, no spaces nor 0x (04A1B2C3), got {row[0]!r}")
        if not 4 <= len(uid) // 2 <= 10:
            raise ConfigError(f"cards.manifest {path} line {line_no}: UID must be 4..10 bytes, "
                              f"got {len(uid) // 2}")
        try:
            card = parse_card(row[1])
        except CardNotationError as error:
            raise ConfigError(f"cards.manifest {path} line {line_no}: {error}") from error
        if uid in manifest:
            raise ConfigError(f"cards.manifest {path} line {line_no}: UID {uid} is listed twice")
        manifest[uid] = card
    return manifest
