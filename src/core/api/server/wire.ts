// The API's messages as bytes. Services and endpoints are marshalled once
// per object (the brain keeps unchanged objects, so every stream and every
// node view sharing one reuses its bytes); the small wrappers around them
// (OpItem, NextItem) are assembled with protobuf-es' BinaryWriter, which is
// what lets a 100,000-endpoint state go out without marshalling it again per
// stream. A test checks these bytes equal protobuf-es' own encoding.

import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  OpItemSchema,
  ServiceSchema,
  type Endpoint,
  type OpItem,
  type Service,
  type Set as SetKind,
} from "../../../gen/localv1/services_pb.ts";
import type { ServiceEndpoints } from "../../brain/state.ts";
import type { WireOp } from "../../wire/ops.ts";
import { encodeEndpoint } from "./encode-endpoint.ts";

export class WireCache {
  private readonly bytes = new WeakMap<Service | Endpoint, Uint8Array>();
  service(s: Service): Uint8Array {
    let b = this.bytes.get(s);
    if (!b) this.bytes.set(s, (b = toBinary(ServiceSchema, s)));
    return b;
  }
  endpoint(e: Endpoint): Uint8Array {
    let b = this.bytes.get(e);
    if (!b) this.bytes.set(e, (b = encodeEndpoint(e)));
    return b;
  }
}

/** The op as a protobuf-es message (the Connect path). */
export function toOpItem(op: WireOp): OpItem {
  switch (op.op) {
    case "set":
      return create(OpItemSchema, { Op: { case: "Set", value: { Ref: { Set: op.set, Path: op.path }, Bytes: op.bytes } } });
    case "delete":
      return create(OpItemSchema, { Op: { case: "Delete", value: { Set: op.set, Path: op.path } } });
    case "sync":
      return create(OpItemSchema, { Op: { case: "Sync", value: {} } });
    case "reset":
      return create(OpItemSchema, { Op: { case: "Reset", value: {} } });
  }
}

// OpItem field numbers: Sync=1 Set=2 Delete=3 Reset=4; Value: Ref=1 Bytes=2; Ref: Set=1 Path=2.
const SYNC_BYTES = Uint8Array.of(0x0a, 0x00);
const RESET_BYTES = Uint8Array.of(0x22, 0x00);

function writeRef(w: BinaryWriter, set: SetKind, path: string): BinaryWriter {
  if (set !== 0) w.tag(1, WireType.Varint).int32(set);
  if (path) w.tag(2, WireType.LengthDelimited).string(path);
  return w;
}

/** The op as OpItem bytes (the fast gRPC path). */
export function encodeOpItem(op: WireOp): Uint8Array {
  if (op.op === "sync") return SYNC_BYTES;
  if (op.op === "reset") return RESET_BYTES;
  const w = new BinaryWriter();
  if (op.op === "delete") {
    w.tag(3, WireType.LengthDelimited).fork();
    writeRef(w, op.set, op.path).join();
  } else {
    w.tag(2, WireType.LengthDelimited).fork();
    w.tag(1, WireType.LengthDelimited).fork();
    writeRef(w, op.set, op.path).join();
    if (op.bytes.length) w.tag(2, WireType.LengthDelimited).bytes(op.bytes);
    w.join();
  }
  return w.finish();
}

/** NextItem { Next: NextFilter{InstanceID=1, Rev=2, NodeName=100} } */
export function encodeNextHead(instanceID: bigint, rev: bigint, nodeName: string): Uint8Array {
  const w = new BinaryWriter().tag(1, WireType.LengthDelimited).fork();
  if (instanceID) w.tag(1, WireType.Varint).uint64(instanceID);
  if (rev) w.tag(2, WireType.Varint).uint64(rev);
  if (nodeName) w.tag(100, WireType.LengthDelimited).string(nodeName);
  return w.join().finish();
}

/** NextItem { Endpoints: ServiceEndpoints{Service=1, Endpoints=2, EndpointKeys=100} } */
export function encodeServiceEndpoints(se: ServiceEndpoints, cache: WireCache): Uint8Array {
  const w = new BinaryWriter().tag(2, WireType.LengthDelimited).fork();
  w.tag(1, WireType.LengthDelimited).bytes(cache.service(se.service));
  for (const ep of se.endpoints.values()) w.tag(2, WireType.LengthDelimited).bytes(cache.endpoint(ep));
  for (const key of se.endpoints.keys()) w.tag(100, WireType.LengthDelimited).string(key);
  return w.join().finish();
}

/** gRPC length-prefixed messages: flag byte 0 (uncompressed), 4-byte big-endian length, message. */
export function frameMessages(msgs: readonly Uint8Array[]): Buffer {
  let size = 0;
  for (const m of msgs) size += 5 + m.length;
  const out = Buffer.allocUnsafe(size);
  let pos = 0;
  for (const m of msgs) {
    out[pos] = 0;
    out.writeUInt32BE(m.length, pos + 1);
    out.set(m, pos + 5);
    pos += 5 + m.length;
  }
  return out;
}

const varintSize = (v: number) => (v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5);

function putVarint(buf: Buffer, pos: number, v: number): number {
  while (v >= 0x80) {
    buf[pos++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  buf[pos++] = v;
  return pos;
}

/**
 * A whole change set as gRPC-framed OpItems, written straight into one
 * buffer: the same bytes as `frameMessages(ops.map(encodeOpItem))` (a test
 * says so) without a writer and an array per op, which a 110,000-op full
 * state would otherwise allocate for every stream.
 */
export function frameOps(ops: readonly WireOp[]): Buffer {
  // Pass 1: sizes. Per op: ref (Set enum + Path), item body, item.
  const pathLens = new Array<number>(ops.length);
  const itemLens = new Array<number>(ops.length);
  let total = 0;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i];
    let item = 2; // Sync and Reset: tag + empty length
    if (op.op === "set" || op.op === "delete") {
      const pl = Buffer.byteLength(op.path);
      pathLens[i] = pl;
      const ref = (op.set !== 0 ? 1 + varintSize(op.set) : 0) + (pl ? 1 + varintSize(pl) + pl : 0);
      const body =
        op.op === "set" ? 1 + varintSize(ref) + ref + (op.bytes.length ? 1 + varintSize(op.bytes.length) + op.bytes.length : 0) : ref;
      item = 1 + varintSize(body) + body;
    }
    itemLens[i] = item;
    total += 5 + item;
  }
  // Pass 2: bytes.
  const buf = Buffer.allocUnsafe(total);
  let pos = 0;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i];
    buf[pos] = 0;
    buf.writeUInt32BE(itemLens[i], pos + 1);
    pos += 5;
    if (op.op === "sync" || op.op === "reset") {
      buf[pos++] = op.op === "sync" ? 0x0a : 0x22;
      buf[pos++] = 0;
      continue;
    }
    const pl = pathLens[i];
    const ref = (op.set !== 0 ? 1 + varintSize(op.set) : 0) + (pl ? 1 + varintSize(pl) + pl : 0);
    const writeRef = () => {
      if (op.set !== 0) {
        buf[pos++] = 0x08;
        pos = putVarint(buf, pos, op.set);
      }
      if (pl) {
        buf[pos++] = 0x12;
        pos = putVarint(buf, pos, pl);
        pos += buf.write(op.path, pos, "utf8");
      }
    };
    if (op.op === "delete") {
      buf[pos++] = 0x1a;
      pos = putVarint(buf, pos, ref);
      writeRef();
    } else {
      const n = op.bytes.length;
      buf[pos++] = 0x12;
      pos = putVarint(buf, pos, 1 + varintSize(ref) + ref + (n ? 1 + varintSize(n) + n : 0));
      buf[pos++] = 0x0a;
      pos = putVarint(buf, pos, ref);
      writeRef();
      if (n) {
        buf[pos++] = 0x12;
        pos = putVarint(buf, pos, n);
        buf.set(op.bytes, pos);
        pos += n;
      }
    }
  }
  return buf;
}
