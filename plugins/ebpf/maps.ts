// Map entries as typed data, and their bytes. The layouts mirror the structs
// of bpf/kpng.bpf.c (change both together). Addresses and ports are in
// network byte order as the sock_addr context holds them; ids, counts and
// flags in host order (little-endian on the amd64 and arm64 nodes kpng
// ships for).

import { hostPort, type IPVersion, ipv6Text, isIPv4 } from "../../src/host/toolkit/index.ts";
import { MAP, type MapName } from "./names.ts";

export interface FrontKey {
  /** the IP version, as the struct holds it */
  family: IPVersion;
  addr: string;
  port: number;
  /** IANA number: 6 TCP, 17 UDP, 132 SCTP */
  proto: number;
}

export interface GroupValue {
  count: number;
  /** ClientIP affinity timeout in seconds, 0 = none */
  affinity: number;
  flags: number;
}

export interface BackendValue {
  addr: string;
  port: number;
}

/** one write or delete in one map; the planner orders them */
export type MapOp =
  | { map: typeof MAP.front; op: "update"; key: FrontKey; group: number }
  | { map: typeof MAP.front; op: "delete"; key: FrontKey }
  | { map: typeof MAP.group; op: "update"; id: number; value: GroupValue }
  | { map: typeof MAP.group; op: "delete"; id: number }
  | { map: typeof MAP.backend; op: "update"; id: number; slot: number; value: BackendValue }
  | { map: typeof MAP.backend; op: "delete"; id: number; slot: number };

export const SIZES: Record<MapName, { key: number; value: number }> = {
  [MAP.front]: { key: 20, value: 4 },
  [MAP.group]: { key: 4, value: 12 },
  [MAP.backend]: { key: 8, value: 20 },
};

/** The 4 or 16 bytes of an address (callers pass addresses the brain validated). */
export function addrBytes(addr: string, out: Uint8Array, at: number) {
  if (isIPv4(addr)) {
    const p = addr.split(".");
    for (let i = 0; i < 4; i++) out[at + i] = Number(p[i]);
    return;
  }
  let s = addr;
  const dot = s.lastIndexOf(".");
  // a dotted IPv4 tail (::ffff:1.2.3.4) becomes two hex groups
  if (dot > 0) {
    const colon = s.lastIndexOf(":");
    const q = s
      .slice(colon + 1)
      .split(".")
      .map(Number);
    s = `${s.slice(0, colon + 1)}${((q[0] << 8) | q[1]).toString(16)}:${((q[2] << 8) | q[3]).toString(16)}`;
  }
  const [head, tail] = s.includes("::") ? s.split("::") : [s, undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  for (let i = 0; i < 8; i++) {
    const g = parseInt(groups[i], 16);
    out[at + 2 * i] = g >> 8;
    out[at + 2 * i + 1] = g & 255;
  }
}

/** The text of 4 (IPv4) or 16 bytes, IPv6 in RFC 5952 form (the longest run of two or more zero groups as "::"). */
export function addrText(bytes: Uint8Array, family: IPVersion): string {
  if (family === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
  const g = new Array<number>(8);
  for (let i = 0; i < 8; i++) g[i] = (bytes[2 * i] << 8) | bytes[2 * i + 1];
  return ipv6Text(g);
}

const scratch = new Uint8Array(16);
/** one spelling per address: what the maps read back gives (IPv4 text is already unique) */
export const canonical = (addr: string) => (isIPv4(addr) ? addr : (addrBytes(addr, scratch, 0), addrText(scratch, 6)));

export function frontKeyBytes(k: FrontKey, out: Uint8Array = new Uint8Array(20), at = 0): Uint8Array {
  addrBytes(k.addr, out, at);
  out[at + 16] = k.port >> 8;
  out[at + 17] = k.port & 255;
  out[at + 18] = k.proto;
  out[at + 19] = k.family;
  return out;
}

export function frontKeyOf(b: Uint8Array, at = 0): FrontKey {
  const family = b[at + 19] === 6 ? 6 : 4;
  return { family, addr: addrText(b.subarray(at, at + 16), family), port: (b[at + 16] << 8) | b[at + 17], proto: b[at + 18] };
}

/** a front key as one string, for maps of what is written */
export const frontId = (k: FrontKey) => `${k.family}|${k.family === 6 ? canonical(k.addr) : k.addr}|${k.proto}|${k.port}`;

export function u32Bytes(n: number, out: Uint8Array = new Uint8Array(4), at = 0): Uint8Array {
  new DataView(out.buffer, out.byteOffset).setUint32(at, n, true);
  return out;
}

export function groupBytes(g: GroupValue, out: Uint8Array = new Uint8Array(12), at = 0): Uint8Array {
  const v = new DataView(out.buffer, out.byteOffset);
  v.setUint32(at, g.count, true);
  v.setUint32(at + 4, g.affinity, true);
  v.setUint32(at + 8, g.flags, true);
  return out;
}

export function groupOf(b: Uint8Array, at = 0): GroupValue {
  const v = new DataView(b.buffer, b.byteOffset);
  return { count: v.getUint32(at, true), affinity: v.getUint32(at + 4, true), flags: v.getUint32(at + 8, true) };
}

export function backendKeyBytes(id: number, slot: number, out: Uint8Array = new Uint8Array(8), at = 0): Uint8Array {
  const v = new DataView(out.buffer, out.byteOffset);
  v.setUint32(at, id, true);
  v.setUint32(at + 4, slot, true);
  return out;
}

export function backendBytes(b: BackendValue, out: Uint8Array = new Uint8Array(20), at = 0): Uint8Array {
  addrBytes(b.addr, out, at);
  out[at + 16] = b.port >> 8;
  out[at + 17] = b.port & 255;
  out[at + 18] = isIPv4(b.addr) ? 4 : 6;
  return out;
}

export function backendOf(b: Uint8Array, at = 0): BackendValue {
  return { addr: addrText(b.subarray(at, at + 16), b[at + 18] === 6 ? 6 : 4), port: (b[at + 16] << 8) | b[at + 17] };
}

/** The op's key and value bytes, written at `at` of `keys`/`values` (buffers of the map's sizes). */
export function encodeOp(op: MapOp, keys: Uint8Array, values: Uint8Array, i: number) {
  const { key, value } = SIZES[op.map];
  const k = i * key;
  const val = i * value;
  switch (op.map) {
    case MAP.front:
      frontKeyBytes(op.key, keys, k);
      if (op.op === "update") u32Bytes(op.group, values, val);
      return;
    case MAP.group:
      u32Bytes(op.id, keys, k);
      if (op.op === "update") groupBytes(op.value, values, val);
      return;
    case MAP.backend:
      backendKeyBytes(op.id, op.slot, keys, k);
      if (op.op === "update") backendBytes(op.value, values, val);
  }
}

const PROTO_NAME: Record<number, string> = { 6: "tcp", 17: "udp", 132: "sctp" };

/** One line per op, for --dry-run and golden tests. */
export function printOp(op: MapOp): string {
  switch (op.map) {
    case MAP.front: {
      const k = `${hostPort(op.key.addr, op.key.port)}/${PROTO_NAME[op.key.proto] ?? op.key.proto}`;
      return op.op === "update" ? `update ${op.map} ${k} group=${op.group}` : `delete ${op.map} ${k}`;
    }
    case MAP.group:
      return op.op === "update"
        ? `update ${op.map} ${op.id} count=${op.value.count} affinity=${op.value.affinity} flags=${op.value.flags}`
        : `delete ${op.map} ${op.id}`;
    case MAP.backend:
      return op.op === "update"
        ? `update ${op.map} ${op.id}/${op.slot} ${op.value.addr} port=${op.value.port}`
        : `delete ${op.map} ${op.id}/${op.slot}`;
  }
}
