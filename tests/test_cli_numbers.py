"""Every number on the command line is range-checked: a clear message and exit 2."""

from __future__ import annotations

import pytest

from shoed.cli import build_parser, main

SIMULATION = [
    ("--decks", ["0", "13", "-1", "x", "2.5"], ["1", "12"]),
    ("--seed", ["-1", "x", str(2**64)], ["0", "123"]),
    ("--pace", ["-0.1", "nan", "inf", "x", "3601"], ["0", "0.2"]),
    ("--shoes", ["-1", "x", "1.5"], ["0", "3"]),
    ("--multi-pull-rate", ["-0.1", "1.1", "nan"], ["0", "1", "0.2"]),
    ("--unnecessary-rate", ["-0.1", "1.5"], ["0.5"]),
    ("--unread-rate", ["-1", "2"], ["0.1"]),
    ("--noise-rate", ["-0.01", "1.01", "inf"], ["0.05"]),
    ("--duplicate-rate", ["-1", "1.5"], ["0.5"]),
    ("--truncate-rate", ["-1", "1.5"], ["0.5"]),
    ("--reboot-after", ["0", "-3", "x"], ["1", "80"]),
]
CASES = (
    [("analyze", "--decks", bad, good) for bad, good in [(["0", "13", "-2", "eight"],
                                                          ["1", "8"])]]
    + [(cmd, option, bad, good) for cmd in ("simulate", "demo")
       for option, bad, good in SIMULATION]
    + [("demo", "--duration", ["-1", "nan", "x"], ["0", "30"]),
       ("simulate", "--listen", [":0", ":65536", "127.0.0.1:x", "nocolon"],
        [":7000", "127.0.0.1:65535"]),
       # 0: any free port, as `shoed console --listen` takes it (outside review of issue 18)
       ("demo", "--console-listen", [":65536", ":-1", "127.0.0.1:x", "nocolon"],
        ["127.0.0.1:0", ":8080"])]
)


@pytest.mark.parametrize(("command", "option", "bad", "good"), CASES,
                         ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_every_number_is_range_checked(capsys: pytest.CaptureFixture[str], command: str,
                                       option: str, bad: list[str], good: list[str]) -> None:
    parser = build_parser()
    for value in bad:
        with pytest.raises(SystemExit) as leaving:
            parser.parse_args([command, f"{option}={value}"])
        assert leaving.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}" in err, err
        assert value in err or repr(value) in err, err
        assert "Traceback" not in err
    for value in good:
        args = parser.parse_args([command, f"{option}={value}"])
        assert getattr(args, option.lstrip("-").replace("-", "_")) is not None


def test_analyze_decks_zero_says_so_without_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(["analyze", "--decks", "0"])
    assert leaving.value.code == 2
    assert "argument --decks: must be from 1 to 12, got 0" in capsys.readouterr().err


def test_ranges_are_inclusive_and_typed() -> None:
    args = build_parser().parse_args(["simulate", "--decks", "12", "--seed", "0",
                                      "--pace", "0", "--noise-rate", "1"])
    assert (args.decks, args.seed, args.pace, args.noise_rate) == (12, 0, 0.0, 1.0)
    assert isinstance(args.decks, int) and isinstance(args.pace, float)


@pytest.mark.parametrize("argv, named", [
    (["tail", "--table", "T01", "--from-seq", "-5"], "--from-seq"),
    (["tail", "--table", "T01", "--grace", "-3"], "--grace"),
    (["tail", "--table", "T01", "--grace", "nan"], "--grace"),
    (["tail", "--table", "a/b"], "--table"),
    (["tail", "--table", "#"], "--table"),
    (["roads", "--timeout", "-1"], "--timeout"),
    (["roads", "--timeout", "nan"], "--timeout"),
    (["sink", "--postgres", "x", "--tables", "T01,a+b"], "--tables"),
])
def test_feed_and_board_options_are_checked(argv: list[str], named: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from shoed.cli import main

    with pytest.raises(SystemExit) as leaving:
        main(argv)
    assert leaving.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err, err


@pytest.mark.parametrize(("option", "value", "said"), [
    # Empty, they were taken as not given: the config's broker, the table DEMO.
    ("--broker", "", "'' is not a broker URL: expected mqtt://HOST[:PORT]"),
    ("--broker", "mqtt://a,mqtt://a:1883", "entry 2 ('mqtt://a:1883') names a broker listed"),
    ("--broker", "http://x", "'http://x': the scheme must be mqtt:// or mqtts://"),
    ("--table", "", "expected a table id of letters, digits and _.- (at most 64), got ''"),
    ("--table", "a/b", "expected a table id"),
])
def test_the_demo_refuses_an_empty_or_unusable_broker_or_table(
        capsys: pytest.CaptureFixture[str], option: str, value: str, said: str) -> None:
    with pytest.raises(SystemExit) as leaving:  # parsed only: no demo runs, whatever comes
        build_parser().parse_args(["demo", option, value])
    assert leaving.value.code == 2
    assert f"argument {option}: {said}" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "named"), [
    (["tail", "--table", "T01", "--url", "http://x:1"], "shoed tail: --url: "),
    (["tail", "--table", "T01", "--url", "mqtt://h:99999"], "shoed tail: --url: "),
    (["tail", "--table", "T01", "--password-file", "/nonexistent/pw"],
     "shoed tail: --password-file /nonexistent/pw: cannot read it: No such file"),
    (["tail", "--table", "T01", "--cursor", "/"], "shoed tail: --cursor /: cannot be used"),
    (["sink", "--url", "http://x", "--postgres", "host=/nonexistent"], "shoed sink: --url: "),
    (["tail", "--table", "T01", "--url", "mqtt://a:1883,mqtts://b:8883"],
     "shoed tail: --url: "),
    (["tail", "--table", "T01", "--prefix", "#"], "shoed tail: --prefix: '#' must not"),
    (["tail", "--table", "T01", "--ca-file", "/etc/hostname"],
     "shoed tail: --ca-file: given, but --url is not mqtts://"),
    (["tail", "--table", "T01", "--url", "mqtts://h", "--ca-file", "/etc/hostname"],
     "shoed tail: --ca-file /etc/hostname: not a PEM certificate bundle"),
    (["sink", "--prefix", "a/+", "--postgres", "host=/nonexistent"], "shoed sink: --prefix: "),
    (["sink", "--group", "g", "--protocol", "3.1.1", "--postgres", "host=/nonexistent"],
     "shoed sink: --group needs MQTT 5"),
    (["simulate", "--port", "/dev/nonexistent"], "shoed simulate: "),
    (["simulate", "--link", "/nonexistent/dir/x"], "shoed simulate: "),
    (["simulate", "--record", "/nonexistent/r.txt"], "shoed simulate: "),
    # A ValueError of pyserial's was a traceback; the forms are device.port's.
    (["simulate", "--port", "foo://x"], "shoed simulate: --port: 'foo://x' has an unknown "
                                        "scheme 'foo://'; expected a device path"),
    (["simulate", "--port", "socket://h"], "shoed simulate: --port: 'socket://h' is not "
                                           "socket://HOST:PORT"),
])
def test_a_client_or_test_tool_option_that_cannot_be_used_is_one_line(
        capsys: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(named) and err.count("\n") == 1, err
