// Element text as the bytes the kernel holds (netlink-batch.ts builds the
// batch around them): a growing buffer of netlink attributes, and the values
// of the types kpng's sets use, laid out as nft lays them out: addresses,
// protocols and ports big-endian, numgen results (a plain 32-bit integer) in
// host order, each field of a concatenation padded to 4 bytes.

import { endianness } from "node:os";

/** netlink headers are in the host's byte order */
export const HOST_LE = endianness() === "LE";
const PROTOCOLS: Record<string, number> = { tcp: 6, udp: 17, sctp: 132 };

export type Field = "ipv4" | "ipv6" | "proto" | "port" | "u32";
const FIELD_BYTES: Record<Field, number> = { ipv4: 4, ipv6: 16, proto: 1, port: 2, u32: 4 };

/** a value's length in the kernel: one field as is, a concatenation with each field padded to 4 bytes */
export const valueLength = (fs: Field[]) =>
  fs.length === 1 ? FIELD_BYTES[fs[0]] : fs.reduce((n, f) => n + ((FIELD_BYTES[f] + 3) & ~3), 0);

/** thrown inside the encoder when an element's text does not fit its set's type; its op then goes to nft */
export class Unencodable extends Error {}

/** a growing buffer of netlink bytes; headers in host order */
export class Writer {
  buf = new Uint8Array(1 << 16);
  /** the same bytes as 32-bit words in host order: headers and attributes start on 4-byte boundaries */
  words = new Uint32Array(this.buf.buffer);
  at = 0;
  private text = new TextEncoder();
  /** the NFTA_SET_ELEM_DATA of each verdict written so far: a batch has few (a chain per service port at most) */
  readonly verdicts = new Map<string, Uint8Array>();
  /** the last address written by address(), and its bytes as words (4 or 16 bytes: whole words) */
  lastAddress: { text: string; field: Field; words: Uint32Array } | undefined;

  room(n: number) {
    if (this.at + n <= this.buf.byteLength) return;
    let size = this.buf.byteLength * 2;
    while (size < this.at + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
    this.words = new Uint32Array(next.buffer);
  }

  u8(v: number) {
    this.buf[this.at++] = v;
  }
  u16(v: number) {
    this.put16(this.at, v);
    this.at += 2;
  }
  put16(at: number, v: number) {
    const b = this.buf;
    const lo = HOST_LE ? 0 : 1;
    b[at + lo] = v & 0xff;
    b[at + 1 - lo] = (v >>> 8) & 0xff;
  }
  u32(v: number) {
    if (this.at & 3) this.put32(this.at, v);
    else this.words[this.at >> 2] = v;
    this.at += 4;
  }
  put32(at: number, v: number) {
    const b = this.buf;
    for (let i = 0; i < 4; i++) b[at + (HOST_LE ? i : 3 - i)] = (v >>> (8 * i)) & 0xff;
  }
  be16(v: number) {
    this.buf[this.at++] = (v >>> 8) & 0xff;
    this.buf[this.at++] = v & 0xff;
  }
  be32(v: number) {
    this.be16((v >>> 16) & 0xffff);
    this.be16(v & 0xffff);
  }
  pad() {
    while (this.at & 3) this.buf[this.at++] = 0;
  }
  /** a few bytes: a loop costs less than TypedArray.set's call at these sizes */
  bytes(b: Uint8Array) {
    const buf = this.buf;
    let at = this.at;
    for (let i = 0; i < b.length; i++) buf[at++] = b[i];
    this.at = at;
  }
  /** a string's bytes (room() was asked for enough); ASCII, nearly always, without an encoder call */
  str(s: string) {
    const buf = this.buf;
    let at = this.at;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        this.at = at + this.text.encodeInto(s.slice(i), buf.subarray(at)).written;
        return;
      }
      buf[at++] = c;
    }
    this.at = at;
  }

  /** starts an attribute: its length is written by end() */
  begin(type: number): number {
    const start = this.at;
    this.u16(0);
    this.u16(type);
    return start;
  }
  end(start: number) {
    this.put16(start, this.at - start);
    this.pad();
  }
  strz(type: number, s: string) {
    const a = this.begin(type);
    this.str(s);
    this.u8(0);
    this.end(a);
  }
}

// Element text is parsed by hand, a character at a time: a first load has
// 100,000s of elements, and splitting and regular expressions per field
// cost more than the rest of the encoding.

const DIGIT_0 = 48;
const isDigit = (c: number) => c >= DIGIT_0 && c <= DIGIT_0 + 9;

/** a decimal integer in s[from, to), at most `max` */
function integer(s: string, from: number, to: number, max: number): number {
  if (from >= to || to - from > 10) throw new Unencodable(s);
  let n = 0;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (!isDigit(c)) throw new Unencodable(s);
    n = n * 10 + c - DIGIT_0;
  }
  if (n > max) throw new Unencodable(s);
  return n;
}

/** a dotted quad in s[from, to) */
function ipv4(w: Writer, s: string, from: number, to: number) {
  let octet = 0;
  let digits = 0;
  let parts = 0;
  for (let i = from; i <= to; i++) {
    const c = i < to ? s.charCodeAt(i) : 46;
    if (isDigit(c)) {
      // a leading zero is no dotted quad to inet_pton, which nft reads addresses with
      if (digits && !octet) throw new Unencodable(s);
      octet = octet * 10 + c - DIGIT_0;
      if (++digits > 3) throw new Unencodable(s);
    } else if (c === 46 && digits && octet <= 255 && parts < 4) {
      w.u8(octet);
      parts++;
      octet = digits = 0;
    } else throw new Unencodable(s);
  }
  if (parts !== 4) throw new Unencodable(s);
}

/** each character's value as a hex digit, -1 for any other */
const HEX = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) HEX["0123456789abcdef".charCodeAt(i)] = HEX["0123456789ABCDEF".charCodeAt(i)] = i;
const COLON = 58;
const DOT = 46;

/**
 * IPv6 text in s[from, to): groups, one "::", an IPv4 tail. Each group's
 * bytes are written as it is read, those after a "::" moved to the end once
 * all are known (a first load parses 100,000s of endpoint addresses, in code
 * that runs cold: each character is read once).
 */
function ipv6(w: Writer, s: string, from: number, to: number) {
  const b = w.buf;
  const at = w.at;
  // groups read so far, at b[at + 2n]
  let n = 0;
  let gap = -1;
  let i = from;
  if (s.charCodeAt(i) === COLON && s.charCodeAt(i + 1) === COLON) {
    gap = 0;
    i += 2;
  }
  while (i < to) {
    const start = i;
    let v = 0;
    // the character that ends the group; the end of the text reads as a colon
    let c = COLON;
    for (; i < to; i++) {
      c = s.charCodeAt(i);
      const h = c < 128 ? HEX[c] : -1;
      if (h < 0) break;
      v = (v << 4) | h;
    }
    if (i === to) c = COLON;
    if (c === DOT) {
      // an IPv4 tail: its 4 bytes are the last two groups
      if (n > 6) throw new Unencodable(s);
      w.at = at + 2 * n;
      ipv4(w, s, start, to);
      n += 2;
      break;
    }
    if (i === start || i - start > 4 || n === 8 || c !== COLON) throw new Unencodable(s);
    b[at + 2 * n] = v >>> 8;
    b[at + 2 * n + 1] = v & 0xff;
    n++;
    if (i === to) break;
    i++;
    if (s.charCodeAt(i) === COLON) {
      if (gap >= 0) throw new Unencodable(s);
      gap = n;
      i++;
    } else if (i === to) throw new Unencodable(s);
  }
  if (gap < 0 ? n !== 8 : n > 7) throw new Unencodable(s);
  if (gap >= 0) {
    // the groups after "::" to the end, zeros where they were
    const tail = 2 * (n - gap);
    b.copyWithin(at + 16 - tail, at + 2 * gap, at + 2 * n);
    b.fill(0, at + 2 * gap, at + 16 - tail);
  }
  w.at = at + 16;
}

/**
 * One address as the kernel holds it; the bytes of the last one are kept and
 * copied when the same text comes again (a list segment's positions share
 * their cluster IP).
 */
export function address(w: Writer, f: "ipv4" | "ipv6", text: string) {
  const at = w.at;
  // a key's address starts on a 4-byte boundary (after its headers): copied a word at a time
  const aligned = (at & 3) === 0;
  const last = w.lastAddress;
  if (aligned && last && last.text === text && last.field === f) {
    const from = last.words;
    const words = w.words;
    for (let i = 0, k = at >> 2; i < from.length; i++) words[k + i] = from[i];
    w.at = at + 4 * from.length;
    return;
  }
  if (f === "ipv4") ipv4(w, text, 0, text.length);
  else ipv6(w, text, 0, text.length);
  if (aligned) w.lastAddress = { text, field: f, words: w.words.slice(at >> 2, w.at >> 2) };
}

/** one value (key or data) as the kernel holds it */
export function value(w: Writer, fs: Field[], text: string) {
  let from = 0;
  for (let i = 0; i < fs.length; i++) {
    const last = i === fs.length - 1;
    const to = last ? text.length : text.indexOf(" . ", from);
    if (to < 0) throw new Unencodable(text);
    switch (fs[i]) {
      case "ipv4":
        ipv4(w, text, from, to);
        break;
      case "ipv6":
        ipv6(w, text, from, to);
        break;
      case "proto": {
        const name = text.slice(from, to);
        w.u8(PROTOCOLS[name] ?? integer(text, from, to, 255));
        break;
      }
      case "port":
        w.be16(integer(text, from, to, 0xffff));
        break;
      case "u32":
        w.u32(integer(text, from, to, 0xffffffff));
        break;
    }
    // each field of a concatenation takes a whole number of 32-bit registers
    if (fs.length > 1) w.pad();
    from = to + 3;
  }
}
