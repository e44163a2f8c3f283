// Reading protobuf wire format by hand, for the few hot messages of the API
// (see streams.ts and decode-endpoint.ts); everything else uses protobuf-es.

export const VARINT = 0;
export const I64 = 1;
export const LEN = 2;
export const I32 = 5;

/** Steps through the fields of buf[pos, limit): a varint's `value`, a length-delimited field's [start, end). */
export class Fields {
  field = 0;
  wireType = 0;
  value = 0;
  start = 0;
  end = 0;
  constructor(
    readonly buf: Buffer,
    private pos: number,
    private readonly limit: number,
  ) {}

  next(): boolean {
    if (this.pos >= this.limit) return false;
    const tag = this.varint();
    this.field = Math.floor(tag / 8);
    this.wireType = tag & 7;
    if (this.wireType === VARINT) this.value = this.varint();
    else if (this.wireType === LEN) {
      const len = this.varint();
      this.start = this.pos;
      this.end = this.pos + len;
      if (this.end > this.limit) throw new Error("truncated field");
      this.pos = this.end;
    } else if (this.wireType === I64) this.pos += 8;
    else if (this.wireType === I32) this.pos += 4;
    else throw new Error(`unsupported wire type ${this.wireType}`);
    return true;
  }

  private varint(): number {
    let v = 0;
    let mul = 1;
    for (;;) {
      if (this.pos >= this.limit) throw new Error("truncated varint");
      const byte = this.buf[this.pos++];
      v += (byte & 0x7f) * mul;
      if (byte < 0x80) return v;
      mul *= 128;
    }
  }
}
