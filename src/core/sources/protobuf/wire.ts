// The protobuf wire format, read in place: varints, length-delimited fields
// and skipping what is not read, over one buffer with no copies. Kubernetes
// objects are proto2 (generated.proto, go-to-protobuf): every field kpng
// reads is a varint (wire type 0) or length-delimited (wire type 2).

export class ProtoError extends Error {}

/** wire types */
export const VARINT = 0;
export const I64 = 1;
export const LEN = 2;
export const I32 = 5;

/** the key of field `n` with wire type `wt`, as it comes off the wire (a varint) */
export const key = (n: number, wt: number) => (n << 3) | wt;

/** Buffer's native UTF-8 slice (Node's and Bun's; not in @types/node) */
type Utf8Slicing = Buffer & { utf8Slice(start: number, end: number): string };

/** a Buffer view of `bytes`, without a copy: Buffers have the native utf8Slice */
export const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/** strings kept by Reader.atom, with their bytes, by a hash of those (a collision is simply not shared) */
const atoms = new Map<number, { text: string; bytes: Uint8Array }>();
const ATOMS = 4096;
const ATOM_MAX = 64;

export class Reader {
  constructor(
    readonly buf: Buffer,
    public pos: number,
  ) {}

  /** a varint of up to 32 bits (keys, lengths, int32: a negative int32 takes 10 bytes, its low 32 bits kept) */
  uint32(): number {
    const buf = this.buf;
    let b = buf[this.pos++];
    if (b < 0x80) return b;
    let v = b & 0x7f;
    b = buf[this.pos++];
    v |= (b & 0x7f) << 7;
    if (b < 0x80) return v;
    b = buf[this.pos++];
    v |= (b & 0x7f) << 14;
    if (b < 0x80) return v;
    b = buf[this.pos++];
    v |= (b & 0x7f) << 21;
    if (b < 0x80) return v;
    b = buf[this.pos++];
    v = (v | ((b & 0x0f) << 28)) >>> 0;
    // bytes 6-10 of a sign-extended negative value carry nothing more for 32 bits
    for (let i = 0; b >= 0x80 && i < 5; i++) b = buf[this.pos++];
    if (b === undefined || b >= 0x80) throw new ProtoError("malformed varint");
    return v;
  }

  int32(): number {
    return this.uint32() | 0;
  }

  /** an int64 as a number (exact up to 2^53: seconds, IntOrString's type) */
  int64(): number {
    const buf = this.buf;
    let v = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      const b = buf[this.pos++];
      if (b === undefined) throw new ProtoError("truncated varint");
      v += (b & 0x7f) * mul;
      if (b < 0x80) return i === 9 ? v - 2 ** 64 : v;
      mul *= 128;
    }
    throw new ProtoError("malformed varint");
  }

  bool(): boolean {
    return this.uint32() !== 0;
  }

  /**
   * The length of a length-delimited field; returns where it ends, checked
   * against `limit`. A length under 128 (nearly all: names, addresses, an
   * endpoint) is its one byte, read here rather than through uint32(): at
   * start-up this runs for every field of 10,000s of objects, in code not
   * compiled yet, where a call costs more than the read.
   */
  sub(limit: number): number {
    let n = this.buf[this.pos];
    if (n < 0x80) this.pos++;
    else n = this.uint32();
    const end = this.pos + n;
    if (end > limit) throw new ProtoError("a field runs past the end of its message");
    return end;
  }

  string(limit: number): string {
    // sub() inline: one call fewer for each of 100,000s of strings read cold
    const start0 = this.pos;
    let n = this.buf[start0];
    if (n < 0x80) this.pos = start0 + 1;
    else n = this.uint32();
    const start = this.pos;
    const end = start + n;
    if (end > limit) throw new ProtoError("a field runs past the end of its message");
    this.pos = end;
    // Node's (and Bun's) native slice: a flat string at once, where building one
    // char by char makes a rope that every later hash or compare must flatten,
    // and a TextDecoder call costs more per short string
    return (this.buf as Utf8Slicing).utf8Slice(start, end);
  }

  /** the bytes [start, end) of the buffer as a string (checked against the message's end by whoever found them) */
  slice(start: number, end: number): string {
    return (this.buf as Utf8Slicing).utf8Slice(start, end);
  }

  /**
   * A string of the few that recur in every object (label keys, namespaces,
   * protocols, node and zone names): the first one read is kept and handed
   * out again, as JSON.parse shares its keys, so 20,000 objects do not each
   * keep a copy (and no string is made for a repeat). Hashed and compared
   * byte against byte, with no call per byte (Math.imul, charCodeAt): until
   * the JIT has compiled this, each such call costs more than the loop's
   * own work, for every byte of 10,000s of names at start-up.
   */
  atom(limit: number): string {
    const start0 = this.pos;
    let len = this.buf[start0];
    if (len < 0x80) this.pos = start0 + 1;
    else len = this.uint32();
    const start = this.pos;
    const end = start + len;
    if (end > limit) throw new ProtoError("a field runs past the end of its message");
    this.pos = end;
    const n = end - start;
    if (n > ATOM_MAX) return (this.buf as Utf8Slicing).utf8Slice(start, end);
    const buf = this.buf;
    let h = n;
    for (let i = start; i < end; i++) h = ((h << 5) - h + buf[i]) | 0; // h * 31 + byte
    const known = atoms.get(h);
    if (known !== undefined && known.bytes.length === n) {
      const bytes = known.bytes;
      let same = true;
      for (let i = 0; i < n; i++) {
        if (bytes[i] !== buf[start + i]) {
          same = false;
          break;
        }
      }
      if (same) return known.text;
    }
    const fresh = (this.buf as Utf8Slicing).utf8Slice(start, end);
    if (known === undefined && atoms.size < ATOMS) atoms.set(h, { text: fresh, bytes: Uint8Array.prototype.slice.call(buf, start, end) });
    return fresh;
  }

  /** skips the value of a field whose key was `k` */
  skip(k: number, limit: number): void {
    switch (k & 7) {
      case VARINT:
        while (this.buf[this.pos++] >= 0x80);
        break;
      case I64:
        this.pos += 8;
        break;
      case LEN:
        this.pos = this.sub(limit);
        break;
      case I32:
        this.pos += 4;
        break;
      default:
        throw new ProtoError(`unsupported wire type ${k & 7} (field ${k >>> 3})`);
    }
    if (this.pos > limit) throw new ProtoError("a field runs past the end of its message");
  }

  /** a message's fields ended exactly at its end (a key read past it means bad bytes) */
  done(end: number): void {
    if (this.pos !== end) throw new ProtoError("a field runs past the end of its message");
  }
}
