"""A private Mosquitto for the demo and the tests: started on a free loopback port."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile
import time


class BrokerError(RuntimeError):
    pass


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")
         if pathlib.Path(p).exists()), None)
    if found is None:
        raise BrokerError("mosquitto is not installed (apt-get install mosquitto)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def password_hash(password: str) -> str:
    """A password as Mosquitto 2's password file keeps it (what `mosquitto_passwd` writes:
    `$7$`, PBKDF2-HMAC-SHA512, 101 iterations, a 12-byte salt)."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101)
    return (f"$7$101${base64.b64encode(salt).decode()}$"
            f"{base64.b64encode(digest).decode()}")


class PrivateMosquitto:
    """`mosquitto -c <conf>` on 127.0.0.1:<port>; stop(), start() again on the same port.

    `websockets=True` (or `websockets_port=N`) adds a second listener speaking MQTT over
    WebSockets (for the console's page) on `ws_port` (`ws_url`). `persistence=True` keeps
    retained messages, sessions and their queued messages across a stop and start (in its
    directory), as the shipped broker configuration does."""

    def __init__(self, port: int | None = None, extra_config: str = "",
                 directory: pathlib.Path | None = None, websockets: bool = False,
                 websockets_port: int | None = None, persistence: bool = False,
                 ws_users: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        # Users (name: password) that alone may use the WebSockets listener. Mosquitto
        # 2.0.11 (Debian 12's) binds a WebSockets listener to every interface whatever
        # address it names (fixed in 2.0.12): without them, anyone on the network could
        # connect there (outside review of issue 18).
        self.ws_users = ws_users
        # MQTT over WebSockets (for a browser), on its own loopback port when asked for.
        self.ws_port: int | None = websockets_port or (free_port() if websockets else None)
        self.dir = directory or pathlib.Path(tempfile.mkdtemp(prefix="shoed-mosquitto-"))
        self.extra_config = extra_config
        self.persistence = persistence
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str | None:
        return None if self.ws_port is None else f"ws://127.0.0.1:{self.ws_port}"

    def start(self, timeout: float = 10.0) -> None:
        conf = self.dir / "mosquitto.conf"
        listener = "" if "listener" in self.extra_config else (
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n")
        if self.ws_port is not None:
            listener += f"listener {self.ws_port} 127.0.0.1\nprotocol websockets\n"
            if self.ws_users:
                passwords = self.dir / "websockets.passwd"
                passwords.write_text("".join(f"{user}:{password_hash(password)}\n"
                                             for user, password in self.ws_users.items()))
                passwords.chmod(0o600)
                listener = ("per_listener_settings true\n" + listener
                            + f"allow_anonymous false\npassword_file {passwords}\n")
        # Started as root, mosquitto would drop to user "mosquitto", which cannot read a
        # private temp dir: this broker is a private one, so it stays the caller's user.
        as_user = f"user {pwd.getpwuid(os.geteuid()).pw_name}\n" if os.geteuid() == 0 else ""
        persist = f"persistence true\npersistence_location {self.dir}/\n" if self.persistence \
            else "persistence false\n"
        conf.write_text(listener + as_user + persist + "log_dest stderr\n"
                        "log_type error\nlog_type warning\n" + self.extra_config)
        log = open(self.dir / "mosquitto.log", "ab")  # noqa: SIM115 - lives with the process
        # Its own session: a Ctrl-C at the terminal goes to the caller's process group, and
        # the caller stops the broker when it is done with it, not before.
        self.proc = subprocess.Popen([mosquitto_binary(), "-c", str(conf)], stdout=log,
                                     stderr=log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"mosquitto exited with {self.proc.returncode}: "
                                  f"{(self.dir / 'mosquitto.log').read_text()[-500:]}")
            if answers("127.0.0.1", self.port, 0.2) and (
                    self.ws_port is None or answers("127.0.0.1", self.ws_port, 0.2)):
                return
            time.sleep(0.05)
        raise BrokerError(f"mosquitto did not answer on port {self.port} in {timeout} s")

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def remove(self) -> None:
        """Stop the broker and delete its directory (config, log)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
