"""Configuration: TOML, environment overrides, errors naming the key and value."""

from __future__ import annotations

import os
import pathlib
import re
import stat
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoed.cli import main
from shoed.config import ConfigError, load_manifest, load_settings
from shoed.store.statedir import StorageError, prepare_state_dir


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "shoed.toml"
    path.write_text(text)
    return path


def test_toml_and_env_override(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[table]\nid = "T07"\n[rules]\ndecks = 6\n[rules.payouts]\nbig = 0.52\n')
    monkeypatch.setenv("SHOED_RULES__PAYOUTS__TIE", "9")
    monkeypatch.setenv("SHOED_TABLE__BETTING_CONTROL", "none")
    settings = load_settings(path)
    assert settings.table.id == "T07" and settings.table.betting_control == "none"
    table = settings.rules.paytable()
    assert (table.big, table.tie, table.banker, settings.rules.decks) == (0.52, 9.0, 0.95, 6)
    assert settings.topic_root == "shoed/T07"


def test_super6_defaults() -> None:
    os.environ.pop("SHOED_RULES__TABLE_TYPE", None)
    table = load_settings(None).rules.model_copy(update={"table_type": "super6"}).paytable()
    assert (table.banker, table.banker_on_six) == (1.0, 0.5)


@pytest.mark.parametrize(("text", "needle"), [
    ("[rules]\ndecks = 0\n", "rules.decks"),
    ("[rules]\ndecks = 'x'\n", "got 'x'"),
    ("[table]\nbetting_control = 'sometimes'\n", "table.betting_control"),
    ("[mqtt]\nurl = 'http://x'\n", "mqtt.url"),
    ("[device]\nvid = 'zz'\n", "device.vid"),
    ("[nonsense]\na = 1\n", "nonsense"),
    ("[rules.payouts]\nbig = -1\n", "rules.payouts.big"),
    ("[rules.payouts]\ntie = true\n", "rules.payouts.tie: Value error, expected a number, not"),
    # A boolean was 1 for any other number: one deck, a day's retention, a page of one.
    ("[rules]\ndecks = true\n", "rules.decks: Value error, expected a number, not true"),
    ("[state]\nretention_days = true\n", "state.retention_days: Value error, expected a"),
    ("[replay]\nmax_events = true\n", "replay.max_events: Value error, expected a number"),
    ("[device]\nvid = true\n", "device.vid: Value error, expected a number, not true"),
    ("[device]\npid = false\n", "device.pid: Value error, expected a number, not false"),
    ("[device]\nreconnect_max_s = true\n", "device.reconnect_max_s: Value error, expected"),
    ("[console]\nwhoami_timeout_s = true\n", "console.whoami_timeout_s: Value error, expe"),
    ("[device]\nserial_no = true\n", "device.serial_no: Input should be a valid string"),
    ("[rules.side_bets.dragon7]\nwin = false\n", "rules.side_bets.dragon7.win: Value error"),
    ("[console]\nlisten = '127.0.0.1:99999'\n", "console.listen: Value error, the port"),
    ("this is not toml", "not valid TOML"),
])
def test_bad_values_name_the_key(tmp_path: pathlib.Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_settings(write(tmp_path, text))


def test_env_override_error_names_key(tmp_path: pathlib.Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOED_RULES__DECKS", "many")
    with pytest.raises(ConfigError, match=r"rules\.decks.*'many'"):
        load_settings(write(tmp_path, ""))


@pytest.mark.parametrize(("name", "value"), [
    ("SHOED_CONSOLE__TABLES", "T01,T02"), ("SHOED_AUTH__ROLES", "alice=supervisor"),
    ("SHOED_MQTT", "x"), ("SHOED_RULES", "{bad")])
def test_a_list_or_table_in_the_environment_that_is_not_json_is_named(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert main(["check-config", str(write(tmp_path, ""))]) == 2
    err = capsys.readouterr().err
    assert f"{name}={value!r}" in err and "as JSON" in err and "Traceback" not in err


def test_a_config_path_that_cannot_be_read_is_named_not_a_traceback(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    config = write(tmp_path, '[mqtt]\nurl = "mqtts://127.0.0.1"\nca_file = "/locked/ca.pem"\n')
    real_exists = pathlib.Path.exists
    locked = {config}

    def exists(path: pathlib.Path, *args: object, **kwargs: object) -> bool:
        # what stat(2) says of a file in a directory this user may not enter
        if str(path).startswith("/locked") or path in locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_exists(path)

    monkeypatch.setattr(pathlib.Path, "exists", exists)
    for key in ("config file", "mqtt.ca_file"):
        assert main(["check-config", str(config)]) == 2
        err = capsys.readouterr().err
        assert f"{key}: cannot read" in err and "Permission denied" in err, err
        assert "Traceback" not in err
        locked.clear()


def test_check_config_cli(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, '[table]\nid = "T1"\n')
    assert main(["check-config", str(good)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = write(tmp_path, "[rules]\ndecks = 99\n")
    assert main(["check-config", str(bad)]) == 2
    assert "rules.decks" in capsys.readouterr().err


@pytest.mark.parametrize(("port", "problem"), [
    ("", "is empty"), ("   ", "is empty"),
    ("tcp://10.0.0.5:4000", "has an unknown scheme 'tcp://'"),
    ("loop://", "is pyserial's loopback, not a line to a shoe"),
    ("../x://y", "has an unknown scheme '../x://'"),
    ("socket://", "is not socket://HOST:PORT"),
    ("socket://shoe.lan", "is not socket://HOST:PORT"),
    ("rfc2217://shoe.lan:99999", "is not rfc2217://HOST:PORT (Port out of range"),
    ("socket://shoe.lan:4000?timeout=3",
     "has an option 'timeout' pyserial does not take (it takes logging)"),
])
def test_a_serial_port_that_cannot_be_opened_is_refused_at_the_check(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], port: str,
        problem: str) -> None:
    """An empty port or an unknown `scheme://` failed only once the daemon ran, as a
    device_open_failed warning every few seconds: refused now, one line, exit 2."""
    path = write(tmp_path, f'[device]\nport = "{port}"\n')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"device.port: {port!r} {problem}" in err, err
    assert "a device path" in err and "socket://HOST:PORT" in err, err  # the accepted forms
    assert main(["run", "--config", str(path)]) == 2  # the daemon's own check, alike
    assert "device.port" in capsys.readouterr().err


def test_a_serial_port_given_in_the_environment_is_checked_too(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SHOED_DEVICE__PORT", "")
    assert main(["check-config", str(write(tmp_path, ""))]) == 2
    assert "device.port: '' is empty" in capsys.readouterr().err


def test_commands_that_never_open_the_device_take_a_config_without_a_port(
        tmp_path: pathlib.Path) -> None:
    """`roads`, `console`, `analyze` and `demo` load the config, not the device: the
    port's check is `run`'s and `check-config`'s."""
    assert load_settings(write(tmp_path, '[device]\nport = ""\n')).device.port == ""


@pytest.mark.parametrize("device", [
    '[device]\nport = "/dev/serial/by-id/usb-Shoe_SN-0001-if00"\n',
    '[device]\nport = "socket://127.0.0.1:4000"\n',
    '[device]\nport = "rfc2217://shoe.lan:2217"\n',
    '[device]\nport = "SOCKET://shoe.lan:4000"\n',  # pyserial reads the scheme in any case
    '[device]\nport = "socket://[::1]:4000"\n',
    '[device]\nport = "rfc2217://shoe.lan:2217?ign_set_control&logging=debug"\n',
    '[device]\nport = "hwgrep://1209:BAC0"\n',  # found by USB id: a real tty
    '[device]\nport = "spy:///dev/ttyUSB0?file=/tmp/shoe.log"\n',
    '[device]\ntransport = "usb"\nport = ""\n',  # a USB shoe has no port: not looked at
])
def test_usable_device_ports_pass(tmp_path: pathlib.Path, device: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, device))]) == 0, capsys.readouterr().err


def test_manifest(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deck.csv"
    path.write_text("uid,card\n04a1b2c3d4e5f6,AS\n04A1B2C3D4E5F7,td\n")
    assert load_manifest(path) == {"04A1B2C3D4E5F6": "AS", "04A1B2C3D4E5F7": "TD"}
    path.write_text("uid,card\n04a1b2c3,AS\n04A1B2C3,KD\n")
    with pytest.raises(ConfigError, match="listed twice"):
        load_manifest(path)
    path.write_text("id,card\n")
    with pytest.raises(ConfigError, match="header 'uid,card'"):
        load_manifest(path)
    path.write_text("uid,card\nzz,AS\n")
    with pytest.raises(ConfigError, match="hex"):
        load_manifest(path)


@pytest.mark.parametrize(("content", "said"), [
    # Not UTF-8 (Latin-1's é): one line naming the file's line, not a UnicodeDecodeError.
    (b"uid,card\n04A1B2C3,AS\n04A1B2C4,A\xe9S\n", r"line 3: not UTF-8 text \(byte 0xe9\)"),
    # bytes.fromhex takes spaces, but the shoe's UID is looked up without any: refused.
    (b"uid,card\n04 A1 B2 C3,AS\n", r"line 2: UID must be hex digits in pairs, no spaces"),
    (b"uid,card\n0x04A1B2C3,AS\n", r"line 2: UID must be hex digits"),
])
def test_a_manifest_the_shoe_could_not_use_is_named_by_its_line(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], content: bytes,
        said: str) -> None:
    deck = tmp_path / "deck.csv"
    deck.write_bytes(content)
    with pytest.raises(ConfigError, match=said):
        load_manifest(deck)
    assert main(["check-config", str(write(tmp_path, f'[cards]\nmanifest = "{deck}"\n'))]) == 2
    err = capsys.readouterr().err
    assert f"cards.manifest {deck} line" in err and "Traceback" not in err


def test_world_writable_state_dir_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    prepare_state_dir(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o750
    state.chmod(0o777)
    with pytest.raises(StorageError, match="world-writable"):
        prepare_state_dir(state)


@pytest.mark.parametrize(("where", "said"), [
    # check-config said OK to each, and `shoed run` refused it.
    ("file", "is not a directory (a file is there)"),
    ("below_file", "is not a directory"),
    ("world_writable", "is world-writable"),
    ("/dev/null", "is not a directory (something else is there)"),
    ("/proc", "is in the kernel's /proc or /sys"),
    ("/sys/kernel/shoed", "is in the kernel's /proc or /sys"),
    ("unwritable_parent", "is not writable by uid"),
    ("", "state.dir: Value error, must not be empty"),  # pathlib made it "."
])
def test_check_config_refuses_the_state_dir_the_start_refuses(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], where: str, said: str) -> None:
    from shoed.store import statedir

    (tmp_path / "file").write_text("x")
    (tmp_path / "world_writable").mkdir(mode=0o777)
    (tmp_path / "world_writable").chmod(0o777)
    (tmp_path / "locked").mkdir()
    real_access = os.access
    monkeypatch.setattr(statedir.os, "access", lambda path, mode: False if pathlib.Path(
        path) == tmp_path / "locked" else real_access(path, mode))
    state = {"file": tmp_path / "file", "below_file": tmp_path / "file" / "state",
             "world_writable": tmp_path / "world_writable",
             "unwritable_parent": tmp_path / "locked" / "state"}.get(where, where)
    assert main(["check-config", str(write(tmp_path, f'[state]\ndir = "{state}"\n'))]) == 2
    err = capsys.readouterr().err
    assert said in err and (f"state.dir {state}" in err or not where), err
    if where in ("file", "world_writable", "/dev/null"):
        with pytest.raises(StorageError, match=re.escape(said)):
            prepare_state_dir(pathlib.Path(state))  # what the start says, the same words


def test_check_config_takes_a_state_dir_the_start_would_make_and_makes_nothing(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "var" / "lib" / "shoed"
    assert main(["check-config", str(write(tmp_path, f'[state]\ndir = "{state}"\n'))]) == 0
    assert not (tmp_path / "var").exists()
    state.mkdir(parents=True, mode=0o750)
    assert main(["check-config", str(write(tmp_path, f'[state]\ndir = "{state}"\n'))]) == 0
    assert list(state.iterdir()) == []  # no lock, no journal


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["table", "device", "mqtt", "rules", "cards", "state",
                                        "junk"]),
                       st.dictionaries(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1,
                                               max_size=12),
                                       st.one_of(st.integers(), st.text(max_size=10),
                                                 st.booleans(), st.floats(allow_nan=False)),
                                       max_size=3), max_size=4))
def test_config_loader_fuzz_never_crashes(tmp_path_factory: pytest.TempPathFactory,
                                          data: dict[str, dict[str, object]]) -> None:
    import tomllib

    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            rendered = repr(value).lower() if isinstance(value, bool) else repr(value)
            if isinstance(value, str):
                rendered = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
            lines.append(f"{key} = {rendered}")
    text = "\n".join(lines) + "\n"
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(text)
    try:
        load_settings(path)
    except ConfigError as error:
        assert str(error)


def test_world_writable_config_and_readable_password_are_refused(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, '[table]\nid = "T1"\n')
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="world-writable"):
        load_settings(path)
    path.chmod(0o640)
    secret = tmp_path / "pw"
    secret.write_text("hunter2")
    secret.chmod(0o644)
    path.write_text(f'[mqtt]\npassword_file = "{secret}"\n')
    with pytest.raises(ConfigError, match="world-readable") as caught:
        load_settings(path)
    assert "hunter2" not in str(caught.value)
    secret.chmod(0o640)
    assert load_settings(path).mqtt.password_file == secret


@pytest.mark.parametrize(("secret", "config", "said"), [
    # Both passed check-config, then failed every connect (UnicodeDecodeError, struct.error).
    (b"s\xe9cret\n", "", r"mqtt\.password_file \S+: not UTF-8 text"),
    (b"x" * 65536, "", r"mqtt\.password_file \S+: 65,536 bytes, over MQTT's 65,535"),
    (b"ok", 'client_id = "' + "x" * 65001 + '"\n', r"mqtt\.client_id: .*at most 65,000 bytes"),
    (b"ok", 'username = "' + "\u00e9" * 32768 + '"\n', r"mqtt\.username: .*at most 65,535"),
])
def test_what_mqtt_cannot_carry_is_refused_before_the_start(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], secret: bytes, config: str,
        said: str) -> None:
    password = tmp_path / "pw"
    password.write_bytes(secret)
    password.chmod(0o600)
    path = write(tmp_path, f'[mqtt]\npassword_file = "{password}"\n{config}')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(said, err) and "Traceback" not in err and "cret" not in err, err[:300]
    assert len(err) < 400  # one line: the long value is not shown whole


def test_a_password_file_spoilt_after_the_start_is_an_error_the_connect_retries(
        tmp_path: pathlib.Path) -> None:
    password = tmp_path / "pw"
    password.write_text("hunter2\n")
    password.chmod(0o600)
    mqtt = load_settings(write(tmp_path, f'[mqtt]\npassword_file = "{password}"\n')).mqtt
    assert mqtt.client_auth()["password"] == "hunter2"
    password.write_bytes(b"hunter\xe9")  # rotated by hand, in Latin-1
    with pytest.raises(OSError, match=r"mqtt\.password_file \S+: not UTF-8"):
        mqtt.client_auth()  # the connection loop's mqtt_unreachable: logged, retried


def test_auth_roles_and_command_limits(tmp_path) -> None:
    from shoed.config import load_settings, write_config

    path = write_config(tmp_path / "c.toml", {
        "auth.roles": {"anna": "supervisor", "gs1": "game_server", "audit": "auditor"},
        "commands": {"max_string": 200}, "replay": {"max_events": 50}})
    settings = load_settings(path)
    assert settings.role_of("anna") == "supervisor"
    assert settings.role_of("gs1") == "game_server"
    assert settings.role_of("nobody") is None
    assert settings.role_of("anonymous") == "supervisor"
    assert settings.commands.limits().max_string == 200
    assert settings.replay.max_events == 50


def test_auth_refuses_unknown_roles_and_wildcard_users(tmp_path) -> None:
    import pytest

    from shoed.config import ConfigError, load_settings, write_config

    bad = write_config(tmp_path / "b.toml", {"auth.roles": {"anna": "boss"}})
    with pytest.raises(ConfigError, match=r"auth\.roles\.anna.*boss"):
        load_settings(bad)
    wild = write_config(tmp_path / "w.toml", {"auth.roles": {"a+b": "auditor"}})
    with pytest.raises(ConfigError, match="a\\+b"):
        load_settings(wild)
@pytest.mark.parametrize("prefix", ["a/#", "#", "casino/+/T1", "a//b", "/casino/T1",
                                    "casino/T1/", "", "$SYS/T1", "a\x00b", " ", "shoed/T01 ",
                                    " shoed/T01", "shoed/ T01", "a\tb", "a\nb",
                                    # C1, line and paragraph separators, BOM, zero width
                                    "a\x85b", "a\u2028b", "a\u2029b", "a\ufeffb", "a\u200bb"])
def test_unusable_topic_prefix_is_refused_naming_key_and_value(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], prefix: str) -> None:
    shown = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in prefix)
    path = write(tmp_path, f'[mqtt]\ntopic_prefix = "{shown}"\n')
    with pytest.raises(ConfigError, match=r"mqtt\.topic_prefix") as caught:
        load_settings(path)
    assert repr(prefix) in str(caught.value)
    # check-config and run refuse it alike, before connecting to anything.
    assert main(["check-config", str(path)]) == 2
    assert "mqtt.topic_prefix" in capsys.readouterr().err
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "mqtt.topic_prefix" in err and repr(prefix) in err


@pytest.mark.parametrize("prefix", ["casino/floor1/T1", "T1", "a-b_c.d/e f", "salle/é/T1"])
def test_usable_topic_prefix_is_kept(tmp_path: pathlib.Path, prefix: str) -> None:
    settings = load_settings(write(tmp_path, f'[mqtt]\ntopic_prefix = "{prefix}"\n'))
    assert settings.topic_root == prefix


def _unreadable(tmp_path: pathlib.Path) -> pathlib.Path:
    """A regular file this process cannot read (root reads any mode: use /proc/self/mem)."""
    if os.geteuid() == 0:
        return pathlib.Path("/proc/self/mem")
    path = tmp_path / "locked.pem"
    path.write_text("x")
    path.chmod(0)
    return path


@pytest.mark.parametrize("key", ["ca_file", "cert_file", "key_file", "password_file"])
@pytest.mark.parametrize("problem", ["missing", "directory", "unreadable"])
def test_mqtt_files_must_exist_and_be_readable(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], key: str,
        problem: str) -> None:
    target = {"missing": tmp_path / "nowhere.pem", "directory": tmp_path,
              "unreadable": _unreadable(tmp_path)}[problem]
    path = write(tmp_path, f'[mqtt]\nurl = "mqtts://127.0.0.1"\n{key} = "{target}"\n')
    expected = {"missing": "does not exist", "directory": "is a directory",
                "unreadable": "cannot read"}[problem]
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"mqtt.{key}: " in err and str(target) in err and expected in err


def _pki(directory: pathlib.Path) -> dict[str, pathlib.Path]:
    """A real CA, and a client certificate with its key, made by openssl."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=c",
        "-keyout", "client.key", "-out", "client.pem")
    run("genrsa", "-out", "other.key", "2048")
    files = {"ca_file": directory / "ca.pem", "cert_file": directory / "client.pem",
             "key_file": directory / "client.key", "other_key": directory / "other.key"}
    for file in files.values():
        file.chmod(0o640)
    return files


def test_loadable_tls_files_pass(tmp_path: pathlib.Path) -> None:
    files = _pki(tmp_path)
    body = "".join(f'{key} = "{files[key]}"\n' for key in ("ca_file", "cert_file", "key_file"))
    settings = load_settings(write(tmp_path, f'[mqtt]\nurl = "mqtts://127.0.0.1"\n{body}'))
    assert settings.mqtt.ca_file == files["ca_file"]


@pytest.mark.parametrize("case, expected", [
    ("ca_not_pem", "mqtt.ca_file: .* is not a PEM certificate bundle"),
    ("cert_not_pem", "mqtt.cert_file/key_file: .* cannot be loaded"),
    ("key_mismatch", "mqtt.cert_file/key_file: .* the key does not fit"),
    ("plain_url", r"mqtt.ca_file: set, but mqtt.url is 'mqtt://127.0.0.1'"),
    ("key_alone", "mqtt.key_file: set without mqtt.cert_file"),
])
def test_tls_files_that_cannot_be_used_are_named(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], case: str,
        expected: str) -> None:
    files = _pki(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    garbage.chmod(0o640)
    url, chosen = "mqtts://127.0.0.1", dict(files)
    chosen.pop("other_key")
    if case == "ca_not_pem":
        chosen["ca_file"] = garbage
    elif case == "cert_not_pem":
        chosen["cert_file"] = garbage
    elif case == "key_mismatch":
        chosen["key_file"] = files["other_key"]
    elif case == "plain_url":
        url = "mqtt://127.0.0.1"
    else:
        chosen.pop("cert_file")
    body = "".join(f'{key} = "{file}"\n' for key, file in chosen.items())
    assert main(["check-config", str(write(tmp_path, f'[mqtt]\nurl = "{url}"\n{body}'))]) == 2
    assert re.search(expected, capsys.readouterr().err)


@pytest.mark.parametrize("problem", ["missing", "directory", "unreadable"])
def test_manifest_file_must_exist_and_be_readable(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], problem: str) -> None:
    target = {"missing": tmp_path / "deck.csv", "directory": tmp_path,
              "unreadable": _unreadable(tmp_path)}[problem]
    path = write(tmp_path, f'[cards]\nmanifest = "{target}"\n')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cards.manifest: " in err and str(target) in err


def test_check_journal_of_a_directory_this_user_may_not_read_says_so(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False
                        if pathlib.Path(path) == tmp_path else real_access(path, mode, **kw))
    assert main(["check-journal", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"shoed: {tmp_path}: Permission denied" in err and "as user" in err
    assert "Traceback" not in err


def test_a_full_disk_at_the_first_start_is_a_storage_error(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from shoed.store import statedir

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(statedir.os, "pwrite", full)
    with pytest.raises(StorageError, match="cannot be written: No space left on device"):
        statedir.lock_state_dir(tmp_path)


def test_a_state_dir_that_is_a_file_is_named_as_such(tmp_path: pathlib.Path) -> None:
    """mkdir's own words were "File exists" (or "Not a directory" for a path below a
    file): the path is there, but not as a directory."""
    file = tmp_path / "state"
    file.write_text("not a directory\n")
    with pytest.raises(StorageError) as caught:
        prepare_state_dir(file)
    assert str(caught.value) == f"state.dir {file} is not a directory (a file is there)"
    below = file / "shoed"
    with pytest.raises(StorageError) as caught:
        prepare_state_dir(below)
    assert str(caught.value) == f"state.dir {below}: {file} is not a directory"


def test_a_state_dir_behind_a_dangling_symbolic_link_names_the_link(
        tmp_path: pathlib.Path) -> None:
    """/var/lib/shoed -> /mnt/data/shoed with the data disk not mounted: "is not a
    directory" said nothing of the link, and was false of a path below it."""
    link = tmp_path / "shoed"
    link.symlink_to(tmp_path / "mnt" / "shoed")
    with pytest.raises(StorageError) as caught:
        prepare_state_dir(link)
    assert str(caught.value) == (f"state.dir {link} is a symbolic link to "
                                 f"{tmp_path / 'mnt' / 'shoed'}, which is not there")
    below = link / "state"
    with pytest.raises(StorageError) as caught:
        prepare_state_dir(below)
    assert str(caught.value) == (f"state.dir {below}: {link} is a symbolic link to "
                                 f"{tmp_path / 'mnt' / 'shoed'}, which is not there")


def _full_tmpfs(path: pathlib.Path) -> bool:
    """A 1 MiB tmpfs at `path` (root and mount(2) only)."""
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0750", "tmpfs",
                           str(path)], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_under_an_existing_journal_is_named_not_a_disk_io_error(
        tmp_path: pathlib.Path) -> None:
    """A real full filesystem: SQLite cannot make the journal's -shm there and says
    "disk I/O error"; the refusal says the disk is full, naming the journal and state.dir,
    as the first start on a full disk says its lock file cannot be written."""
    disk = tmp_path / "disk"
    if not _full_tmpfs(disk):
        pytest.skip("needs root and mount(2) for a real full filesystem")
    from shoed.store.journal import Journal

    try:
        state = disk / "state"
        Journal(state).close()
        with open(disk / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
        with pytest.raises(StorageError) as caught:
            Journal(state)
        message = str(caught.value)
        assert message.startswith(f"journal {state / 'journal.sqlite3'}: the disk is full ("
                                  ), message
        assert f"bytes free for state.dir {state}; SQLite said: disk I/O error)" in message
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_journal_error_is_called_a_full_disk_only_when_it_is_one(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLITE_FULL and ENOSPC say so themselves; SQLite's "disk I/O error" is a full disk
    only when the filesystem has (next to) nothing left for this user."""
    import errno
    import sqlite3

    from shoed.store import statedir

    def sqlite_error(words: str, code: int) -> sqlite3.Error:
        error = sqlite3.OperationalError(words)
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
        return error

    free = [0]

    class Stat:
        f_frsize = 4096

        @property
        def f_bavail(self) -> int:
            return free[0]

        f_bfree = f_bavail
        f_blocks = 256

    monkeypatch.setattr(statedir.os, "statvfs", lambda path: Stat())
    io_error = sqlite_error("disk I/O error", sqlite3.SQLITE_IOERR_SHMSIZE)
    full = sqlite_error("database or disk is full", sqlite3.SQLITE_FULL)
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    for error, said in ((io_error, "SQLite said: disk I/O error"),
                        (full, "SQLite said: database or disk is full"),
                        (enospc, "No space left on device")):
        assert statedir.failure_cause(error, tmp_path) == \
            f"the disk is full (0 bytes free for state.dir {tmp_path}; {said})"
    free[0] = 10_000  # 40 MB free: an I/O error is not the disk's being full
    assert statedir.failure_cause(io_error, tmp_path) == "disk I/O error"
    assert statedir.failure_cause(full, tmp_path).startswith("the disk is full (40960000 ")
    locked = sqlite_error("database is locked", sqlite3.SQLITE_BUSY)
    free[0] = 0
    assert statedir.failure_cause(locked, tmp_path) == "database is locked"
    # A read error (a bad sector) on a nearly full disk is not the disk's being full.
    bad_sector = sqlite_error("disk I/O error", sqlite3.SQLITE_IOERR_READ)
    assert statedir.failure_cause(bad_sector, tmp_path) == "disk I/O error"
    # A filesystem that gives no size (0 blocks: some FUSE and network ones) says nothing.
    Stat.f_blocks = 0
    assert statedir.failure_cause(io_error, tmp_path) == "disk I/O error"


def test_a_variable_with_one_underscore_after_the_section_is_refused_not_ignored(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOED_MQTT_URL", "mqtt://elsewhere:1883")
    with pytest.raises(ConfigError, match=r"SHOED_MQTT_URL: not a setting .*SHOED_MQTT__URL"):
        load_settings(write(tmp_path, ""))
    monkeypatch.delenv("SHOED_MQTT_URL")
    monkeypatch.setenv("SHOED_VENV", "/somewhere")  # the scripts' own: no section's name
    assert load_settings(write(tmp_path, "")).mqtt.url == "mqtt://127.0.0.1:1883"


@pytest.mark.parametrize(("name", "said"), [
    # A misspelt section was ignored silently: the daemon ran on the file's value.
    ("SHOED_RULE__DECKS", r"'rule' is no section of the configuration \(sections: table, "),
    ("SHOED_STATES__DIR", "'states' is no section"),
    ("SHOED_MQQT__URL", "'mqqt' is no section"),
    ("shoed_mqqt__url", "'mqqt' is no section"),  # read case-insensitively, as pydantic does
    ("SHOED_TABLE__IDD", r"table\.idd is not a setting \(table has: id, betting_control\)"),
    ("SHOED_RULES___DECKS", r"rules\._decks is not a setting"),
    ("SHOED_RULES__SIDE_BETS__DRAGON8__WIN", r"rules\.side_bets\.dragon8 is not a setting"),
    ("SHOED_RULES__DECKS__MIN", r"rules\.decks is a value, it has no keys"),
    # pydantic-settings lower-cases the name: the broker user PitSup1 would be pitsup1.
    ("SHOED_AUTH__ROLES__PitSup1", r"auth\.roles names 'PitSup1', which would be read as "
                                   r"'pitsup1' .* as JSON, SHOED_AUTH__ROLES='\{\"PitSup1\""),
])
def test_a_variable_that_names_no_setting_is_refused_naming_it(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], name: str, said: str) -> None:
    monkeypatch.setenv(name, "6")
    assert main(["check-config", str(write(tmp_path, ""))]) == 2
    err = capsys.readouterr().err
    assert re.search(f"environment variable {name}: {said}", err), err


def test_the_variables_that_are_settings_or_the_scripts_own_are_read_or_left_alone(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"SHOED_TEST_ONCE": "0", "SHOED_FAULTS": "long", "SHOED_CI_TIMEOUT": "9",
                        "SHOED_REQUIRE_BROWSER": "1", "SHOED_PYTHON": "python3",
                        "SHOED_AUTH__ROLES__pit-boss": "supervisor",  # lower case: kept
                        "SHOED_RULES__SIDE_BETS__LUCKY6__PRESET": "12/23",
                        "SHOED_RULES": '{"decks": 6}'}.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(write(tmp_path, ""))
    assert settings.auth.roles == {"pit-boss": "supervisor"} and settings.rules.decks == 6
    assert settings.rules.side_bets.lucky6 is not None
    monkeypatch.setenv("SHOED_AUTH__ROLES", '{"PitSup1": "supervisor"}')  # JSON keeps the case
    monkeypatch.delenv("SHOED_AUTH__ROLES__pit-boss")
    assert load_settings(write(tmp_path, "")).auth.roles == {"PitSup1": "supervisor"}
