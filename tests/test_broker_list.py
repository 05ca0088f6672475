"""`mqtt.url` as one broker or a list: the config forms, bad entries, and the order in
which connection attempts go to the brokers (shoed/mqtt/brokers.py)."""

from __future__ import annotations

import pathlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoed.cli import main
from shoed.config import ConfigError, load_settings
from shoed.mqtt.brokers import BrokerList, BrokerUrl, parse_broker_url

A, B, C = "mqtt://10.0.0.1:1883", "mqtt://10.0.0.2:1884", "mqtt://broker-c"


@pytest.fixture(autouse=True)
def _no_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOED_MQTT__URL", raising=False)


def load(tmp_path: pathlib.Path, text: str):
    path = tmp_path / "shoed.toml"
    path.write_text(text)
    return load_settings(path)


def test_one_url_stays_a_string(tmp_path: pathlib.Path) -> None:
    mqtt = load(tmp_path, f'[mqtt]\nurl = "{A}"\n').mqtt
    assert mqtt.url == A and mqtt.urls == [A]
    assert mqtt.host_port == ("10.0.0.1", 1883) and mqtt.tls is False


def test_toml_list(tmp_path: pathlib.Path) -> None:
    mqtt = load(tmp_path, f'[mqtt]\nurl = ["{A}", "{B}", "{C}"]\n').mqtt
    assert mqtt.urls == [A, B, C]
    assert [b.host_port for b in mqtt.brokers] == [
        ("10.0.0.1", 1883), ("10.0.0.2", 1884), ("broker-c", 1883)]
    assert mqtt.host_port == ("10.0.0.1", 1883)  # one-broker tools use the first


def test_a_list_of_one_is_one_broker(tmp_path: pathlib.Path) -> None:
    assert load(tmp_path, f'[mqtt]\nurl = ["{A}"]\n').mqtt.url == A


@pytest.mark.parametrize("value", [f"{A},{B}", f" {A} , {B} ", f'["{A}", "{B}"]'])
def test_env_override_comma_separated_or_json(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              value: str) -> None:
    monkeypatch.setenv("SHOED_MQTT__URL", value)
    settings = load(tmp_path, f'[mqtt]\nurl = ["{C}"]\n')  # the environment wins
    assert settings.mqtt.urls == [A, B]


def test_tls_per_url_with_default_port(tmp_path: pathlib.Path) -> None:
    mqtt = load(tmp_path, '[mqtt]\nurl = ["mqtts://a.example", "mqtts://b.example:9883/"]\n'
                ).mqtt
    assert mqtt.tls is True
    assert [(b.host, b.port, b.tls) for b in mqtt.brokers] == [
        ("a.example", 8883, True), ("b.example", 9883, True)]


@pytest.mark.parametrize(("url", "needle"), [
    (f'["{A}", "http://10.0.0.2"]', r"entry 2 of 2: 'http://10.0.0.2': the scheme must be"),
    (f'["{A}", "mqtt://x:70000"]', r"entry 2 of 2: 'mqtt://x:70000': bad port"),
    (f'["{A}", ""]', r"entry 2 of 2: empty"),
    (f'"{A},,{B}"', r"entry 2 of 3: empty \(a stray comma\?\)"),
    (f'["{A}", "mqtt://10.0.0.1"]', r"entry 2 \('mqtt://10.0.0.1'\) names a broker listed"),
    (f'["{A}", "mqtts://b.example"]', r"mixes mqtts:// and mqtt:// \(mqtt://10.0.0.1:1883"),
    ('["mqtt://u:pw@host"]', r"no credentials in the URL"),
    ('["mqtt://host/table"]', r"no path"),
    ('"broker.example:1883"', r"is not a broker URL"),
    ("[]", r"at least one broker URL"),
    ("[1883]", r"mqtt\.url"),
])
def test_bad_entries_are_named(tmp_path: pathlib.Path, url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=r"mqtt\.url") as caught:
        load(tmp_path, f"[mqtt]\nurl = {url}\n")
    assert re.search(needle, str(caught.value)), str(caught.value)


def test_check_config_accepts_a_list_and_names_a_bad_entry(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.toml"
    good.write_text(f'[mqtt]\nurl = ["{A}", "{B}"]\n')
    assert main(["check-config", str(good)]) == 0
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[mqtt]\nurl = ["{A}", "mqt://b"]\n')
    assert main(["check-config", str(bad)]) == 2
    assert "entry 2 of 2: 'mqt://b'" in capsys.readouterr().err


# --- the order of attempts -------------------------------------------------------------


def brokers(*urls: str) -> BrokerList:
    return BrokerList.of(urls)


def test_attempts_go_in_order_and_wait_after_a_whole_round() -> None:
    b = brokers(A, B, C)
    assert b.current.url == A
    assert b.advance(was_connected=False) is False and b.current.url == B
    assert b.advance(was_connected=False) is False and b.current.url == C
    assert b.advance(was_connected=False) is True and b.current.url == A  # round over


def test_the_one_that_dropped_goes_last() -> None:
    b = brokers(A, B, C)
    b.advance(was_connected=False)
    b.connected()
    assert b.in_use is not None and b.in_use.url == B
    assert b.advance(was_connected=True) is True  # a drop: the caller's short wait
    assert b.in_use is None
    assert b.round == [A, C, B]
    assert b.advance(was_connected=False) is False and b.current.url == C
    assert b.advance(was_connected=False) is False and b.current.url == B
    assert b.advance(was_connected=False) is True and b.round == [A, B, C]


def test_one_broker_is_retried_after_the_back_off() -> None:
    b = brokers(A)
    assert b.advance(was_connected=False) is True and b.current.url == A
    b.connected()
    assert b.advance(was_connected=True) is True and b.current.url == A


@given(st.integers(1, 5), st.lists(st.booleans(), max_size=60))
def test_every_round_tries_each_broker_once_before_waiting(n: int, outcomes: list[bool]
                                                           ) -> None:
    urls = [f"mqtt://host{i}:1883" for i in range(n)]
    b = brokers(*urls)
    tried: list[str] = []
    for connected in outcomes:
        tried.append(b.current.url)
        dropped = b.current.url
        if connected:
            b.connected()
        wait = b.advance(was_connected=connected)
        if connected:
            assert wait and b.round[-1] == dropped and sorted(b.round) == sorted(urls)
            assert b.round[:-1] == [u for u in urls if u != dropped]
            tried = []
        elif wait:
            assert sorted(tried) == sorted(urls)  # the whole list, each once
            assert b.round == urls  # the next round starts from the top
            tried = []
        else:
            assert len(set(tried)) == len(tried) < n


@pytest.mark.parametrize("urls", ["mqtt://127.0.0.1:1,mqtt://127.0.0.1:1",
                                  "mqtt://a,mqtt://b:1883,mqtt://A:1883"])
def test_tail_refuses_a_broker_listed_twice_as_mqtt_url_does(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], urls: str) -> None:
    """`tail --url` took the list that mqtt.url refuses (one check now: BrokerList's)."""
    assert main(["tail", "--table", "T01", "--url", urls]) == 2
    err = capsys.readouterr().err
    assert "--url: " in err and "names a broker listed before" in err, err
    config = tmp_path / "shoed.toml"
    config.write_text(f"[mqtt]\nurl = {urls.split(',')!r}\n".replace("'", '"'))
    assert main(["check-config", str(config)]) == 2
    assert "mqtt.url: Value error, entry " in capsys.readouterr().err


def test_parse_broker_url() -> None:
    assert parse_broker_url("mqtts://[::1]:8884") == BrokerUrl("mqtts://[::1]:8884", "::1",
                                                               8884, True)
    with pytest.raises(ValueError, match="port 0"):
        parse_broker_url("mqtt://host:0")


def test_a_broker_that_answered_before_and_now_sends_no_connack_hangs() -> None:
    """No CONNACK in time from a URL that gave one earlier in this run is a broker that
    hangs (stopped, overloaded), not "not an MQTT broker" (outside review: a SIGSTOPped
    Mosquitto was reported as not a broker, at error level, five times)."""
    import aiomqtt

    from shoed.errors import BrokerError, NotABroker
    from shoed.mqtt.brokers import connect_failure

    error = aiomqtt.MqttError("Operation timed out")
    hung = connect_failure("mqtt://127.0.0.1:1883", error, 5.0, answered_before=True)
    assert type(hung) is BrokerError and "answered as a broker before" in str(hung)
    stranger = connect_failure("mqtt://127.0.0.1:1883", error, 5.0)
    assert isinstance(stranger, NotABroker) and "is it an MQTT broker?" in str(stranger)
