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

export class Reader {
  constructor(
    readonly buf: Uint8Array,
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

  /** the length of a length-delimited field; returns where it ends, checked against `limit` */
  sub(limit: number): number {
    const n = this.uint32();
    const end = this.pos + n;
    if (end > limit) throw new ProtoError("a field runs past the end of its message");
    return end;
  }

  string(limit: number): string {
    const end = this.sub(limit);
    const start = this.pos;
    this.pos = end;
    return utf8(this.buf, start, end);
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

/**
 * Node's (and Bun's) native UTF-8 slice: a flat string at once, where
 * building one char by char makes a rope that every later hash or compare
 * must flatten, and a TextDecoder call costs more per short string (10,000s
 * of names and addresses at start-up).
 */
const utf8Slice = (Buffer.prototype as unknown as { utf8Slice: (this: Uint8Array, start: number, end: number) => string }).utf8Slice;

export function utf8(buf: Uint8Array, start: number, end: number): string {
  return utf8Slice.call(buf, start, end);
}
