# Packets a normal socket cannot send: an IPv4 UDP datagram to a loopback
# address (127.0.0.0/8) written straight onto a link, as a host on that link
# could. The kernel routes such a packet only with route_localnet=1, and
# kube-proxy's guard rule must then drop it. Two modes:
#   send IFNAME DSTMAC SRCIP DSTIP DPORT COUNT   COUNT frames out of IFNAME (AF_PACKET)
#   listen IP PORT           prints "ready", then "got" for each datagram, until killed
import socket
import struct
import sys
import time


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def send(ifname, dst_mac, src_ip, dst_ip, dport, count="1"):
    payload = b"martian"
    udp = struct.pack("!HHHH", 40000, int(dport), 8 + len(payload), 0) + payload  # checksum 0: none (IPv4)
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, socket.IPPROTO_UDP, 0,
        socket.inet_aton(src_ip), socket.inet_aton(dst_ip),
    )
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    src_mac = s.getsockname()[4]
    frame = bytes.fromhex(dst_mac.replace(":", "")) + src_mac + struct.pack("!H", 0x0800) + header + udp
    for _ in range(int(count)):
        s.send(frame)
        time.sleep(0.05)


def listen(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, int(port)))
    print("ready", flush=True)
    while True:
        s.recv(2048)
        print("got", flush=True)


if __name__ == "__main__":
    {"send": send, "listen": listen}[sys.argv[1]](*sys.argv[2:])
