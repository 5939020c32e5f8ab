"""One connection to one bookie (docs/protocol.md "Connection lifecycle"): the Hello, the
authentication, then pipelined requests matched to responses by request id.

Runs on the asyncio event loop of its Client; nothing here is thread-safe. The read loop
is one task per connection; every request waits on a future the read loop completes.
"""

import asyncio
import hmac
import os
import struct

from . import wire
from .errors import BookieUnavailable, Timeout, Unauthorized, UnsupportedVersion


class TooManyConnections(BookieUnavailable):
    """The bookie answered the Hello TooManyRequests: retry after a backoff."""


def _answer_challenge(bookie_id, hello, secret, client_nonce):
    """Returns (method, client nonce, client proof, expected bookie proof) answering the
    challenge of a Hello that asks for authentication (docs/protocol.md "Authentication").
    Method 2 proofs are bound to the id the bookie names, which must be bookie_id, the id this
    client dialed; the channel binding is empty, this client speaking plain TCP only. Method 1
    is answered for bookies that predate method 2. Raises Unauthorized for another id or an
    unknown method, before anything is sent."""
    if hello.auth_method == wire.AUTH_HMAC_SHA256_BOUND:
        try:
            bn, named = wire.decode_auth_challenge(hello.auth_data)
        except wire.ProtocolError as e:
            raise Unauthorized("%s sent a bad challenge: %s" % (bookie_id, e)) from None
        if named != bookie_id.encode():
            raise Unauthorized("%s names itself %r in its Hello" % (bookie_id, named.decode(errors="replace")))
        cp, bp = wire.auth_bound_proofs(secret, named, bn, client_nonce)
    elif hello.auth_method == wire.AUTH_HMAC_SHA256 and len(hello.auth_data) == wire.NONCE_LEN:
        cp, bp = wire.auth_proofs(secret, hello.auth_data, client_nonce)
    else:
        raise Unauthorized("%s asks for unknown auth method %d" % (bookie_id, hello.auth_method))
    return hello.auth_method, client_nonce, cp, bp


class Conn:
    """A handshaken, authenticated connection. request() may be called by many tasks at
    once; responses come in any order."""

    def __init__(self, bookie_id, reader, writer, features):
        self.bookie_id = bookie_id
        self.features = features
        self._reader = reader
        self._writer = writer
        self._next_id = 1
        self._inflight = {}  # request id -> (opcode, future)
        self._abandoned = set()  # ids whose caller timed out: a late answer is dropped
        self.closed = False
        self.close_reason = None
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, bookie_id, host, port, secret, timeout, features=0):
        """Connects, exchanges Hellos and authenticates. Raises UnsupportedVersion,
        TooManyConnections, Unauthorized, Timeout or BookieUnavailable."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except asyncio.TimeoutError:
            raise Timeout("connect to %s" % bookie_id) from None
        except OSError as e:
            raise BookieUnavailable("connect to %s: %s" % (bookie_id, e)) from None
        try:
            hello = await asyncio.wait_for(cls._handshake(bookie_id, reader, writer, secret, features), timeout)
        except asyncio.TimeoutError:
            writer.close()
            raise Timeout("handshake with %s" % bookie_id) from None
        except (OSError, asyncio.IncompleteReadError, wire.ProtocolError) as e:
            writer.close()
            raise BookieUnavailable("handshake with %s: %s" % (bookie_id, e)) from None
        except BaseException:
            writer.close()
            raise
        return cls(bookie_id, reader, writer, hello.features)

    @staticmethod
    async def _handshake(bookie_id, reader, writer, secret, features):
        writer.write(wire.encode_hello(1, 1, features))
        await writer.drain()
        head = await reader.readexactly(4)
        (length,) = struct.unpack(">I", head)
        if length < 22 or length + 4 > wire.HELLO_MAX:
            raise wire.ProtocolError("hello length %d" % length)
        hello = wire.decode_hello(head + await reader.readexactly(length))
        if hello.status == wire.TOO_MANY_REQUESTS:
            raise TooManyConnections("%s is at its connection limit" % bookie_id)
        if hello.status == wire.UNSUPPORTED_VERSION:
            raise UnsupportedVersion("%s speaks versions %d..%d, this client 1..1" % (
                bookie_id, hello.min_version, hello.max_version))
        if hello.status != wire.OK:
            raise BookieUnavailable("%s answered the hello %s" % (bookie_id, wire.status_name(hello.status)))
        if hello.version != wire.VERSION:
            raise wire.ProtocolError("%s chose version %d" % (bookie_id, hello.version))
        if hello.features & ~features:
            raise wire.ProtocolError("%s accepted features 0x%x it was not offered" % (bookie_id, hello.features))
        if hello.auth_method == 0:
            if secret:
                # A bookie that does not ask cannot prove it holds the secret.
                raise Unauthorized("%s does not authenticate, and this client holds a secret" % bookie_id)
            return hello
        if not secret:
            raise Unauthorized("%s requires authentication and this client has no secret" % bookie_id)
        method, cn, cp, bp = _answer_challenge(bookie_id, hello, secret, os.urandom(wire.NONCE_LEN))
        writer.write(wire.encode_request(wire.AUTH, 0, 0, wire.auth_body(method, cn + cp)))
        await writer.drain()
        head = await reader.readexactly(4)
        (length,) = struct.unpack(">I", head)
        if length < 14 or length > 14 + 2 + 1024:
            raise wire.ProtocolError("auth response length %d" % length)
        op, rid, status, body = wire.decode_response(await reader.readexactly(length))
        if op != wire.AUTH or rid != 0:
            raise wire.ProtocolError("auth answered with opcode 0x%02x id %d" % (op, rid))
        if status == wire.UNAUTHORIZED:
            raise Unauthorized("%s refused the cluster secret" % bookie_id)
        if status != wire.OK:
            raise BookieUnavailable("%s answered AUTH %s" % (bookie_id, wire.status_name(status)))
        if not hmac.compare_digest(wire.decode_auth_response(body), bp):
            raise Unauthorized("%s does not hold the cluster secret (wrong proof)" % bookie_id)
        return hello

    async def _read_loop(self):
        reason = "closed by the bookie"
        try:
            while True:
                head = await self._reader.readexactly(4)
                (length,) = struct.unpack(">I", head)
                if length < 14 or length + 4 > wire.FRAME_MAX + 64:
                    raise wire.ProtocolError("response length %d" % length)
                op, rid, status, body = wire.decode_response(await self._reader.readexactly(length))
                slot = self._inflight.pop(rid, None)
                if slot is None:
                    if rid in self._abandoned:
                        self._abandoned.discard(rid)
                        continue
                    raise wire.ProtocolError("response to unknown request id %d" % rid)
                self._abandoned.discard(rid)
                want_op, fut = slot
                if op != want_op:
                    raise wire.ProtocolError("response opcode 0x%02x to a 0x%02x request" % (op, want_op))
                if not fut.done():
                    fut.set_result((status, body))
        except asyncio.CancelledError:
            reason = "closed by the client"
        except (OSError, asyncio.IncompleteReadError) as e:
            reason = "connection lost: %s" % (e or type(e).__name__)
        except wire.ProtocolError as e:
            reason = "protocol error: %s" % e
        self._shutdown(reason)

    def _shutdown(self, reason):
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - already broken
            pass
        err = BookieUnavailable("%s: %s" % (self.bookie_id, reason))
        for _, fut in self._inflight.values():
            if not fut.done():
                fut.set_exception(err)
        self._inflight.clear()

    def close(self):
        if not self.closed:
            self._task.cancel()
            self._shutdown("closed by the client")

    async def request(self, opcode, flags, body, timeout):
        """Sends one request and returns (status, body) of its response. Raises Timeout
        after timeout seconds (the answer may still come: it is dropped) and
        BookieUnavailable when the connection breaks first."""
        if self.closed:
            raise BookieUnavailable("%s: %s" % (self.bookie_id, self.close_reason))
        rid = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFFFFFFFFFFFFFF or 1
        fut = asyncio.get_running_loop().create_future()
        self._inflight[rid] = (opcode, fut)
        self._writer.write(wire.encode_request(opcode, flags, rid, body))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise Timeout("%s: no answer to opcode 0x%02x in %.1fs" % (self.bookie_id, opcode, timeout)) from None
        finally:
            # Timed out or cancelled: a late answer is dropped, not a protocol error.
            if self._inflight.pop(rid, None) is not None:
                self._abandoned.add(rid)
