// How the API server wraps objects in protobuf (k8s.io/apimachinery
// runtime/serializer/protobuf): a body is the 4 bytes "k8s\0" then a
// runtime.Unknown { typeMeta 1 { apiVersion 1, kind 2 }, raw 2,
// contentEncoding 3, contentType 4 } whose raw is the object (a List: its
// ListMeta { resourceVersion 2, continue 3 } as field 1, each item as field
// 2). A watch (`;stream=watch`) is a stream of frames, each a 4-byte
// big-endian length and a *bare* metav1.WatchEvent { type 1, object 2:
// RawExtension { raw 1 } }: no "k8s\0", no runtime.Unknown around the event
// (the API server writes events with its raw serializer); only the object in
// the RawExtension is a body as above. Recorded from kube-apiserver 1.36.2:
// `00 00 01 ef 0a 05 "ADDED" 12 e5 03 0a e2 03 "k8s\0" 0a 0d 0a 02 "v1" ...`.

import { Checked } from "../../brain/k8s/objects.ts";
import { checkedReaders } from "./checked.ts";
import { decoders, nameOf, type Raw } from "./objects.ts";
import { asBuffer, LEN, ProtoError, Reader } from "./wire.ts";

export const MAGIC = Uint8Array.of(0x6b, 0x38, 0x73, 0x00);

/** An item that did not decode: parseObject refuses it, naming the object if its metadata could be read. */
export const UNDECODABLE = "kpng.undecodable";

export const hasMagic = (buf: Uint8Array, at = 0) =>
  buf[at] === 0x6b && buf[at + 1] === 0x38 && buf[at + 2] === 0x73 && buf[at + 3] === 0x00;

interface Unknown {
  apiVersion: string;
  kind: string;
  /** where raw lies in the buffer */
  start: number;
  end: number;
}

/**
 * The runtime.Unknown of a body lying at [start, end): magic checked, raw
 * located; its typeMeta read when `typeMeta` (a watch frame's own is
 * skipped: every frame is a WatchEvent).
 */
export function unwrap(buf: Buffer, start: number, end: number, typeMeta: boolean): Unknown {
  if (end - start < 4 || !hasMagic(buf, start)) throw new ProtoError("not a Kubernetes protobuf body (no k8s\\0 prefix)");
  const r = new Reader(buf, start + 4);
  const u: Unknown = { apiVersion: "", kind: "", start: 0, end: 0 };
  let encoding = "";
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10 && typeMeta) {
      const tend = r.sub(end);
      while (r.pos < tend) {
        const k = r.uint32();
        if (k === 10) u.apiVersion = r.atom(tend);
        else if (k === 18) u.kind = r.atom(tend);
        else r.skip(k, tend);
      }
      r.done(tend);
    } else if (t === 18) {
      u.end = r.sub(end);
      u.start = r.pos;
      r.pos = u.end;
    } else if (t === 26) encoding = r.string(end);
    else r.skip(t, end);
  }
  r.done(end);
  if (encoding) throw new ProtoError(`unsupported contentEncoding ${JSON.stringify(encoding)}`);
  return u;
}

/** One object of a known kind, decoded from [start, end); one that does not decode comes back as UNDECODABLE. */
export function decodeObject(kind: string, buf: Buffer, start: number, end: number): Raw {
  const decode = decoders[kind];
  if (!decode) throw new ProtoError(`no protobuf decoder for kind ${kind}`);
  try {
    return decode(new Reader(buf, start), end);
  } catch (err) {
    if (!(err instanceof ProtoError)) throw err;
    return { metadata: nameOf(buf, start, end), [UNDECODABLE]: err.message };
  }
}

/**
 * A Service or EndpointSlice of a list or a watch: read straight into its
 * checked object (checked.ts) when it is well-formed, which parseObject then
 * takes as it is; any other object as decodeObject reads it.
 */
export function decodeItem(kind: string, buf: Buffer, start: number, end: number): Raw {
  const read = checkedReaders[kind];
  if (read) {
    try {
      const checked = read(new Reader(buf, start), end);
      // a Checked stands in for the item: the sources read only its metadata, and parseObject the rest
      if (checked) return checked as unknown as Raw;
    } catch (err) {
      // bad bytes: decodeObject says what is wrong with them
      if (!(err instanceof ProtoError)) throw err;
    }
  }
  return decodeObject(kind, buf, start, end);
}

/** A whole body (a Status, say): its kind and object. */
export function decodeBody(bytes: Uint8Array): { kind: string; apiVersion: string; object: Raw } {
  const buf = asBuffer(bytes);
  const u = unwrap(buf, 0, buf.length, true);
  return { kind: u.kind, apiVersion: u.apiVersion, object: decodeObject(u.kind, buf, u.start, u.end) };
}

/** A whole protobuf body as the object it holds: what the Kubernetes HTTP client (core/kube-http/) is handed to read protobuf answers. */
export const protobufObject = (bytes: Uint8Array): Record<string, unknown> => decodeBody(bytes).object;

/** The varint at `pos` of `buf` and the position after it; null when the bytes end first. */
function peekVarint(buf: Buffer, pos: number, end: number): { value: number; next: number } | null {
  let value = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) return null;
    const b = buf[pos++];
    value += (b & 0x7f) * mul;
    if (b < 0x80) return { value, next: pos };
    mul *= 128;
  }
  throw new ProtoError("malformed varint");
}

/**
 * A List decoded as its bytes arrive: each item as soon as its last byte is
 * in (items are length-delimited), so decoding overlaps the transfer; the
 * ListMeta (written before the items) as soon as it is in. Only the bytes of
 * an item not yet complete are kept between chunks, in one buffer used again
 * from chunk to chunk (kube-apiserver writes 2 KB chunks and an EndpointSlice
 * is about as long: a new buffer per chunk was two allocations per item).
 * Decoded items keep none of its bytes (strings are copied out).
 */
export class ListDecoder {
  /** the unfinished field's bytes, [0, pending) of `store` */
  private store: Buffer = Buffer.alloc(0);
  private pending = 0;
  /** absolute offset of store[0] in the body */
  private base = 0;
  private phase: "magic" | "unknown" | "list" = "magic";
  /** absolute end of the List (Unknown.raw) */
  private listEnd = 0;
  private rawSeen = false;
  resourceVersion = "";
  continue = "";

  constructor(
    /** the kind of the items (list items carry none) */
    private readonly kind: string,
    /** the ListMeta has arrived */
    private readonly onMeta: (meta: { resourceVersion: string; continue: string }) => void = () => {},
  ) {}

  /** The items completed by `chunk`. */
  push(chunk: Uint8Array): Raw[] {
    let buf: Buffer;
    let end: number;
    if (this.pending) {
      end = this.pending + chunk.length;
      this.reserve(end);
      this.store.set(chunk, this.pending);
      buf = this.store;
    } else {
      buf = asBuffer(chunk);
      end = buf.length;
    }
    const items: Raw[] = [];
    let pos = 0;
    for (;;) {
      if (this.phase === "magic") {
        if (end - pos < 4) break;
        if (!hasMagic(buf, pos)) throw new ProtoError("not a Kubernetes protobuf body (no k8s\\0 prefix)");
        pos += 4;
        this.phase = "unknown";
        continue;
      }
      if (this.phase === "list" && this.base + pos === this.listEnd) {
        this.phase = "unknown";
        continue;
      }
      const tag = peekVarint(buf, pos, end);
      if (!tag) break;
      if ((tag.value & 7) !== LEN) {
        // no varint field is read at either level: skip it whole or wait for it
        const v = peekVarint(buf, tag.next, end);
        if (!v) break;
        pos = v.next;
        continue;
      }
      const len = peekVarint(buf, tag.next, end);
      if (!len) break;
      const start = len.next;
      const field = tag.value >>> 3;
      if (this.phase === "unknown" && field === 2) {
        // Unknown.raw: the List itself, entered rather than waited for
        if (this.rawSeen) throw new ProtoError("two List bodies in one answer");
        this.rawSeen = true;
        this.listEnd = this.base + start + len.value;
        pos = start;
        this.phase = "list";
        continue;
      }
      const stop = start + len.value;
      if (this.phase === "list" && this.base + stop > this.listEnd) throw new ProtoError("an item runs past the end of the List");
      if (stop > end) break;
      if (this.phase === "list") {
        if (field === 2) items.push(decodeItem(this.kind, buf, start, stop));
        else if (field === 1) this.listMeta(buf, start, stop);
      } else if (field === 3 && stop > start) throw new ProtoError("unsupported contentEncoding");
      pos = stop;
    }
    this.base += pos;
    // keep only the unfinished field; a copy, so the chunk it came from can go
    const rest = end - pos;
    if (buf === this.store) this.store.copyWithin(0, pos, end);
    else if (rest) {
      this.reserve(rest);
      buf.copy(this.store, 0, pos, end);
    }
    this.pending = rest;
    return items;
  }

  /** room for `n` bytes in store, what it holds kept */
  private reserve(n: number) {
    if (this.store.length >= n) return;
    const grown = Buffer.allocUnsafe(Math.max(n, 2 * this.store.length, 8192));
    this.store.copy(grown, 0, 0, this.pending);
    this.store = grown;
  }

  /** The body has ended: throws if it ended early. */
  end(): void {
    if (this.pending || this.phase !== "unknown" || !this.rawSeen) throw new ProtoError("the List ends early (truncated answer)");
  }

  private listMeta(buf: Buffer, start: number, end: number) {
    const r = new Reader(buf, start);
    while (r.pos < end) {
      const t = r.uint32();
      if (t === 18) this.resourceVersion = r.string(end);
      else if (t === 26) this.continue = r.string(end);
      else r.skip(t, end);
    }
    r.done(end);
    this.onMeta({ resourceVersion: this.resourceVersion, continue: this.continue });
  }
}

/**
 * A watch event as JSON has it: `{type, object}`, the object with its kind
 * and apiVersion. `undecodable`: the event's bytes did not decode (why);
 * its type is then "" and its object empty.
 */
export interface WatchEvent {
  type: string;
  object: Raw;
  undecodable?: string;
}

/**
 * Frames of a protobuf watch stream, each decoded to a WatchEvent as soon as
 * it is whole. A frame whose bytes are not a WatchEvent comes back marked
 * `undecodable`, and the frames after it are read as usual: its length
 * prefix was sound, so the stream still is. A length that cannot be (past
 * MAX_FRAME) throws: nothing after it can be trusted.
 *
 * The API server's HTTP/1.1 answers come in chunks of at most 2 KB (Go's
 * net/http chunks a body in bufferBeforeChunkingSize pieces), and an
 * EndpointSlice of 10 endpoints is about 2 KB: nearly every frame of a
 * streamed list spans two chunks. Such a frame is put together in a buffer
 * of its own, allocated once its length is known and filled in place, chunk
 * after chunk; the frame's decoded object keeps none of its bytes (strings
 * are copied out), so that buffer is used again for the next frame that
 * spans chunks. Whole frames are decoded in the chunk itself.
 */
export class WatchDecoder {
  /** the length prefix of a frame cut inside it (1-3 of its 4 bytes) */
  private head: number[] = [];
  /** the frame under way, [0, filled) read so far, `size` long; null: none */
  private frame: Buffer | null = null;
  private size = 0;
  private filled = 0;
  /** kept for the next frame that spans chunks: frames up to REUSE_MAX bytes */
  private scratch: Buffer = Buffer.alloc(0);
  /** frames longer than this are refused (a corrupt length would otherwise wait forever) */
  static readonly MAX_FRAME = 64 << 20;
  /** a longer frame gets a buffer of its own, not kept afterwards */
  private static readonly REUSE_MAX = 256 << 10;

  push(chunk: Uint8Array): WatchEvent[] {
    const events: WatchEvent[] = [];
    const buf = asBuffer(chunk);
    const end = buf.length;
    let pos = 0;
    // the rest of a length prefix cut in the last chunk
    while (this.head.length && pos < end) {
      this.head.push(buf[pos++]);
      if (this.head.length === 4) {
        const [a, b, c, d] = this.head;
        this.head = [];
        this.begin(frameLength(Buffer.of(a, b, c, d), 0));
      }
    }
    // the rest of a frame begun in an earlier chunk
    if (this.frame) {
      const n = Math.min(this.size - this.filled, end - pos);
      buf.copy(this.frame, this.filled, pos, pos + n);
      this.filled += n;
      pos += n;
      if (this.filled < this.size) return events;
      events.push(frameEvent(this.frame, 0, this.size));
      this.frame = null;
    }
    while (end - pos >= 4) {
      const len = frameLength(buf, pos);
      if (end - pos - 4 < len) {
        this.begin(len);
        const n = end - pos - 4;
        buf.copy(this.frame!, 0, pos + 4, end);
        this.filled = n;
        return events;
      }
      events.push(frameEvent(buf, pos + 4, pos + 4 + len));
      pos += 4 + len;
    }
    for (; pos < end; pos++) this.head.push(buf[pos]);
    return events;
  }

  /** a frame of `len` bytes begins: where its bytes go */
  private begin(len: number) {
    this.size = len;
    this.filled = 0;
    if (len > WatchDecoder.REUSE_MAX) this.frame = Buffer.allocUnsafe(len);
    else {
      if (this.scratch.length < len) this.scratch = Buffer.allocUnsafe(Math.max(len, 4096));
      this.frame = this.scratch;
    }
    // a frame of no bytes is whole at once: decoded (as undecodable) by the next push, as before
  }
}

/** One whole frame's event, or the frame marked undecodable (a kpng bug on one object included: it must not stop the stream). */
function frameEvent(buf: Buffer, start: number, end: number): WatchEvent {
  try {
    return watchEvent(buf, start, end);
  } catch (err) {
    return { type: "", object: {}, undecodable: err instanceof Error ? err.message : String(err) };
  }
}

/** the length of the frame at `pos` (its 4-byte big-endian prefix), refused past MAX_FRAME */
function frameLength(buf: Buffer, pos: number): number {
  const len = ((buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]) >>> 0;
  if (len > WatchDecoder.MAX_FRAME) throw new ProtoError(`a watch frame of ${len} bytes`);
  return len;
}

/**
 * One frame: a bare WatchEvent whose object is a body of its own. A frame
 * that does start with "k8s\0" (no API server writes one; a WatchEvent's first
 * byte is a field tag, never 0x6b) is unwrapped first: liberal in what it takes.
 */
export function watchEvent(buf: Buffer, start: number, end: number): WatchEvent {
  if (end - start >= 4 && hasMagic(buf, start)) {
    const u = unwrap(buf, start, end, false);
    start = u.start;
    end = u.end;
  }
  const r = new Reader(buf, start);
  let type = "";
  let object: Raw | undefined;
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) type = r.atom(end);
    else if (t === 18) {
      const xend = r.sub(end);
      while (r.pos < xend) {
        const k = r.uint32();
        if (k === 10) {
          const oend = r.sub(xend);
          const inner = unwrap(buf, r.pos, oend, true);
          object = decodeItem(inner.kind, buf, inner.start, inner.end);
          if (!(object instanceof Checked)) {
            object.kind = inner.kind;
            if (inner.apiVersion) object.apiVersion = inner.apiVersion;
          }
          r.pos = oend;
        } else r.skip(k, xend);
      }
      r.done(xend);
    } else r.skip(t, end);
  }
  r.done(end);
  if (!object) throw new ProtoError(`watch event ${type || "(no type)"} without an object`);
  return { type, object };
}
