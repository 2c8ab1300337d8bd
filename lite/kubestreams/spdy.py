"""The SPDY/3.1 subset that port-forward needs: frame parsing and building, with zlib header blocks.

kubectl 1.31+ tunnels a SPDY/3.1 byte stream inside WebSocket binary messages (older ones speak it on the
raw upgraded connection); message boundaries mean nothing, so `SpdyReader.feed` takes arbitrary chunks and
returns whole frames. Header blocks are zlib streams primed with the SPDY/3 dictionary, one compression
context per direction for the whole session (never reset between frames): a `SpdyReader` and a
`SpdyWriter` each own theirs, so use one of each per session.

Pure and synchronous (zlib work is tiny: a few hundred bytes per stream).
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import field

from lite.records import dataclass

# The SPDY/3 header-compression dictionary (draft 3, section 2.6.10.1): length-prefixed words, then a tail.
_DICT_WORDS = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location", "content-md5",
    "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host", "if-match",
    "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified", "location",
    "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer", "retry-after",
    "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via", "warning",
    "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url", "public",
    "set-cookie", "keep-alive", "origin",
)
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def header_dictionary() -> bytes:
    """The 1423-byte SPDY/3 zlib dictionary."""
    words = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICT_WORDS)
    return words + _DICT_TAIL.encode()


VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_FRAME = (1 << 24) - 1
RST_PROTOCOL_ERROR, RST_INVALID_STREAM, RST_REFUSED_STREAM, RST_CANCEL = 1, 2, 3, 5


class SpdyError(Exception):
    """The peer sent something this subset cannot parse: end the session."""


@dataclass
class Frame:
    """One parsed frame. Control frames have `type` > 0; data frames have type 0."""

    type: int
    flags: int
    stream_id: int = 0
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    value: int = 0  # PING id, RST_STREAM/GOAWAY status

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class SpdyReader:
    """Turns a SPDY byte stream, fed in arbitrary pieces, into frames."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._z = zlib.decompressobj(zdict=header_dictionary())

    def feed(self, chunk: bytes) -> list[Frame]:
        self._buf += chunk
        frames: list[Frame] = []
        while len(self._buf) >= 8:
            length = int.from_bytes(self._buf[5:8], "big")
            if len(self._buf) < 8 + length:
                break
            head = bytes(self._buf[:8])
            payload = bytes(self._buf[8:8 + length])
            del self._buf[:8 + length]
            frames.append(self._parse(head, payload))
        return frames

    def _parse(self, head: bytes, payload: bytes) -> Frame:
        word, flags = struct.unpack(">I", head[:4])[0], head[4]
        if not word & 0x80000000:
            return Frame(0, flags, word & 0x7FFFFFFF, payload)
        version, ftype = (word >> 16) & 0x7FFF, word & 0xFFFF
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        if ftype == SYN_STREAM:
            sid = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            return Frame(ftype, flags, sid, headers=self._headers(payload[10:]))
        if ftype in (SYN_REPLY, HEADERS):
            sid = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            return Frame(ftype, flags, sid, headers=self._headers(payload[4:]))
        if ftype == RST_STREAM:
            sid, status = struct.unpack(">II", payload[:8])
            return Frame(ftype, flags, sid & 0x7FFFFFFF, value=status)
        if ftype == PING:
            return Frame(ftype, flags, value=struct.unpack(">I", payload[:4])[0])
        if ftype == GOAWAY:
            sid, status = struct.unpack(">II", payload[:8]) if len(payload) >= 8 else (0, 0)
            return Frame(ftype, flags, sid & 0x7FFFFFFF, value=status)
        return Frame(ftype, flags, data=payload)  # SETTINGS, WINDOW_UPDATE, unknown: callers ignore

    def _headers(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._z.decompress(block)
        except zlib.error as e:
            raise SpdyError(f"bad header block: {e}") from None
        out: dict[str, str] = {}
        try:
            (count,) = struct.unpack(">I", raw[:4])
            pos = 4
            for _ in range(count):
                (n,) = struct.unpack(">I", raw[pos:pos + 4])
                name = raw[pos + 4:pos + 4 + n].decode()
                pos += 4 + n
                (n,) = struct.unpack(">I", raw[pos:pos + 4])
                out[name.lower()] = raw[pos + 4:pos + 4 + n].decode()
                pos += 4 + n
        except (struct.error, UnicodeDecodeError) as e:
            raise SpdyError(f"bad header block: {e}") from None
        return out


class SpdyWriter:
    """Builds frames to send; owns the outgoing header-compression context."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, header_dictionary())

    def _block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers))
        for k, v in headers.items():
            kb, vb = k.lower().encode(), v.encode()
            raw += struct.pack(">I", len(kb)) + kb + struct.pack(">I", len(vb)) + vb
        return self._z.compress(raw) + self._z.flush(zlib.Z_SYNC_FLUSH)

    @staticmethod
    def _control(ftype: int, flags: int, payload: bytes) -> bytes:
        return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None, *, fin: bool = False) -> bytes:
        payload = struct.pack(">I", stream_id) + self._block(headers or {})
        return self._control(SYN_REPLY, FLAG_FIN if fin else 0, payload)

    def syn_stream(self, stream_id: int, headers: dict[str, str], *, fin: bool = False) -> bytes:
        """Used by tests acting as the client (server-initiated streams are not needed)."""
        payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + self._block(headers)
        return self._control(SYN_STREAM, FLAG_FIN if fin else 0, payload)

    def rst_stream(self, stream_id: int, status: int) -> bytes:
        return self._control(RST_STREAM, 0, struct.pack(">II", stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        return self._control(PING, 0, struct.pack(">I", ping_id))

    def goaway(self, last_stream_id: int, status: int = 0) -> bytes:
        return self._control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))

    @staticmethod
    def data(stream_id: int, data: bytes, *, fin: bool = False) -> list[bytes]:
        """DATA frames carrying `data` (split at the 24-bit length limit); an empty one when only FIN."""
        frames = []
        chunks = [data[i:i + MAX_FRAME] for i in range(0, len(data), MAX_FRAME)] or [b""]
        for i, chunk in enumerate(chunks):
            flags = FLAG_FIN if fin and i == len(chunks) - 1 else 0
            frames.append(struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(chunk)) + chunk)
        return frames


class SpdySession:
    """What both server-side SPDY sessions (exec, port-forward) share: one reader and one writer (each holding
    its direction's compression context) and a lock, so frames built and sent under it never interleave and
    the compression contexts stay in frame order."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send
        self._reader = SpdyReader()
        self._writer = SpdyWriter()
        self._lock = asyncio.Lock()

    async def _out(self, build: Callable[[], bytes | list[bytes]]) -> None:
        async with self._lock:
            frames = build()
            for frame in frames if isinstance(frames, list) else [frames]:
                await self._send(frame)
