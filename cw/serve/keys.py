"""Keys for `--key`: one ZeroMQ CURVE keypair shared by a controller, its workers and its
clients (`cw serve keygen`). A router with a key encrypts its connections and admits only peers
presenting the same key; a dealer with it talks only to such a router. The transport
(cw/serve/transport.py) applies them to its sockets."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

_KEY_HEADER = ("# cw serve key (ZeroMQ CURVE). Whoever has this file can join the controller that\n"
               "# uses it, as a worker or a client: keep it private (mode 600).\n")


@dataclass(frozen=True)
class CurveKey:
    """One keypair shared by a controller, its workers and its clients (Z85 text, 40 chars)."""
    public: bytes
    secret: bytes

    def __repr__(self) -> str:  # never the secret in a log or traceback
        return f"CurveKey(public={self.public.decode()!r})"


def write_key(path) -> CurveKey:
    """A new keypair in a new file, readable by its owner only."""
    import zmq

    public, secret = zmq.curve_keypair()
    text = (f'{_KEY_HEADER}curve\n    public-key = "{public.decode()}"\n'
            f'    secret-key = "{secret.decode()}"\n')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never over another key
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return CurveKey(public, secret)


def read_key(path) -> CurveKey:
    """The keypair in `path` (written by `write_key`, or a ZeroMQ certificate with both
    keys); a UsageError that says what is wrong with it otherwise."""
    import re

    import zmq

    from cw.errors import UsageError

    try:
        text = open(path).read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read key file {path}: {getattr(e, 'strerror', None) or e}",
                         "make one with `cw serve keygen FILE`") from None
    found = dict(re.findall(r'^\s*(public-key|secret-key)\s*=\s*"([^"]*)"', text, re.M))
    public, secret = found.get("public-key", "").encode(), found.get("secret-key", "").encode()
    if len(public) != 40 or len(secret) != 40:
        raise UsageError(f"{path} is not a cw key file (no public-key and secret-key of 40 "
                         "characters)", "make one with `cw serve keygen FILE`")
    try:
        if zmq.curve_public(secret) != public:
            raise ValueError
    except (ValueError, zmq.ZMQError):
        raise UsageError(f"{path}: its public and secret keys do not belong together",
                         "make a new one with `cw serve keygen FILE`") from None
    return CurveKey(public, secret)


class _Gatekeeper:
    """ZeroMQ's authentication handler (ZAP) of one context: a router with a key admits only
    peers presenting that same key. Each router names its key as its ZAP domain, so routers
    of other keys in the same process keep their own."""

    _by_context: dict[int, "_Gatekeeper"] = {}
    _lock = threading.Lock()

    def __init__(self, context):
        from zmq.auth.thread import ThreadAuthenticator

        self.allowed: dict[str, bytes] = {}  # domain -> the public key it takes
        self.refused = 0
        self.auth = ThreadAuthenticator(context, log=_quiet_auth_log())
        self.auth.start()

    @classmethod
    def admit(cls, context, key: CurveKey) -> str:
        """Start the context's handler (once); returns the ZAP domain of `key`."""
        with cls._lock:
            keeper = cls._by_context.get(id(context))
            if keeper is None:
                keeper = cls._by_context[id(context)] = cls(context)
        domain = "cw-" + key.public.decode()
        with cls._lock:
            if domain not in keeper.allowed:
                keeper.allowed[domain] = key.public
                keeper.auth.configure_curve_callback(domain=domain, credentials_provider=keeper)
        return domain

    def callback(self, domain: str, client_key: bytes) -> bool:
        """`client_key`: the peer's public key, Z85-encoded."""
        ok = self.allowed.get(domain) == client_key
        self.refused += not ok
        return ok


def _quiet_auth_log():
    import logging

    log = logging.getLogger("cw.transport.auth")  # pyzmq logs every handshake at DEBUG
    log.setLevel(logging.WARNING)
    return log


def handshake_words(zmq) -> dict:
    """The handshake events a dealer's monitor watches, in words (None: it went through)."""
    return {zmq.EVENT_HANDSHAKE_SUCCEEDED: None,
            zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused this key (it holds another one)",
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "does not hold this key (another one, or "
                                                  "not a cw controller)",
            # a mechanism mismatch: which side lacks a key, the transport says (it knows ours)
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: None}


def curve_server(sock, context, key: CurveKey) -> None:
    import zmq

    sock.setsockopt_string(zmq.ZAP_DOMAIN, _Gatekeeper.admit(context, key))
    sock.curve_server = True
    sock.curve_publickey = key.public
    sock.curve_secretkey = key.secret


def curve_client(sock, key: CurveKey | None) -> None:
    if key is not None:  # the router's public key is the shared one too
        sock.curve_serverkey = key.public
        sock.curve_publickey = key.public
        sock.curve_secretkey = key.secret
