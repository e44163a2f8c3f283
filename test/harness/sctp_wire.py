# Just enough SCTP (RFC 9260) to send an INIT and answer it with an INIT-ACK
# over raw sockets, for a kernel without SCTP sockets. Checksums are CRC32c,
# stored little-endian as Linux's sctp_compute_cksum does.
import os
import struct

_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _packet(sport, dport, vtag, chunk):
    body = struct.pack("!HHII", sport, dport, vtag, 0) + chunk
    return body[:8] + struct.pack("<I", crc32c(body)) + body[12:]


def build_init(sport, dport, tag):
    chunk = struct.pack("!BBHIIHHI", 1, 0, 20, tag, 65535, 1, 1, tag)
    return _packet(sport, dport, 0, chunk)


def build_init_ack(init, text):
    text = text + b"\0" * (-len(text) % 4)
    cookie = struct.pack("!HH", 7, 4 + len(text)) + text
    tag = int.from_bytes(os.urandom(4), "big") or 1
    chunk = struct.pack("!BBHIIHHI", 2, 0, 20 + len(cookie), tag, 65535, 1, 1, tag) + cookie
    return _packet(init["dport"], init["sport"], init["tag"], chunk)


def parse_sctp(data):
    """Common header + first chunk; for INIT/INIT-ACK also the initiate tag and the cookie."""
    if len(data) < 16:
        return None
    sport, dport, vtag = struct.unpack("!HHI", data[:8])
    ctype, _, clen = struct.unpack("!BBH", data[12:16])
    out = {"sport": sport, "dport": dport, "vtag": vtag, "chunk": ctype, "tag": 0, "cookie": b""}
    if ctype in (1, 2) and len(data) >= 32:
        out["tag"] = struct.unpack("!I", data[16:20])[0]
        off, end = 32, min(len(data), 12 + clen)
        while off + 4 <= end:
            ptype, plen = struct.unpack("!HH", data[off : off + 4])
            if plen < 4:
                break
            if ptype == 7:
                out["cookie"] = data[off + 4 : off + plen]
            off += plen + (-plen % 4)
    return out
