"""The options `shoed tail` and `shoed sink` share (the broker, the login, TLS), checked
before anything connects: one line naming the option, exit 2 (decisions.md 164)."""

from __future__ import annotations

import argparse
import pathlib
import ssl
from typing import Any

from shoed.config import TlsFileError, tls_context, topic_prefix_problem
from shoed.mqtt.brokers import BrokerList, split_urls


class OptionError(Exception):
    """An option that cannot be used; the message names it."""


def _read(path: pathlib.Path, option: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise OptionError(f"{option} {path}: cannot read it: "
                          f"{getattr(error, 'strerror', None) or error}") from None


def feed_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of TableFeed/TableConnection from the shared options."""
    try:
        brokers = BrokerList.of(split_urls(args.url))
    except ValueError as error:
        raise OptionError(f"--url: expected mqtt:// or mqtts:// URLs, got {args.url!r}: "
                          f"{error}") from None
    tls = {b.tls for b in brokers.brokers}
    if len(tls) > 1:
        raise OptionError(f"--url: {args.url!r}: every broker must use TLS (mqtts://), "
                          "or none")
    problem = topic_prefix_problem(args.prefix)
    if problem is not None:
        raise OptionError(f"--prefix: {args.prefix!r} {problem}")
    password = _read(args.password_file, "--password-file").strip() \
        if args.password_file else None
    context: ssl.SSLContext | None = None
    files = {"--ca-file": args.ca_file, "--cert-file": args.cert_file,
             "--key-file": args.key_file}
    given = [option for option, path in files.items() if path is not None]
    if given and tls != {True}:
        raise OptionError(f"{given[0]}: given, but --url is not mqtts:// ({args.url!r})")
    if args.key_file is not None and args.cert_file is None:
        raise OptionError("--key-file: given without --cert-file")
    if True in tls:
        for path, option in ((args.ca_file, "--ca-file"), (args.cert_file, "--cert-file"),
                             (args.key_file, "--key-file")):
            if path is not None:
                _read(path, option)
        try:
            context = tls_context(args.ca_file, args.cert_file, args.key_file)
        except TlsFileError as error:
            if error.which == "ca":
                raise OptionError(f"--ca-file {args.ca_file}: not a PEM certificate bundle "
                                  f"({error.cause})") from None
            raise OptionError(f"--cert-file {args.cert_file}: cannot be loaded: not PEM, "
                              f"or the key does not fit ({error.cause})") from None
    return {"username": args.username, "password": password, "protocol": args.protocol,
            "tls_context": context}
