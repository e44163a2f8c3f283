// One connection's worth of each RPC. Reconnecting is the caller's business
// (see client.ts); these end or throw when the stream does.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  NextFilterSchema,
  ServiceSchema,
  WatchReqSchema,
  type Endpoint,
  type NextFilter,
  type Service,
  type Set as SetKind,
} from "../../../gen/localv1/services_pb.ts";
import { decodeEndpoint } from "./decode-endpoint.ts";
import type { ChangeSet, WireOp } from "../../wire/ops.ts";
import type { GrpcConnection } from "./grpc.ts";
import { Fields, LEN, VARINT } from "./wire-read.ts";
import type { SnapshotEntry } from "./replica.ts";

/**
 * `Sets.Watch` as change sets. The next WatchReq goes out only when the
 * consumer asks for the next change set: that is the stream's flow control.
 */
export async function* watchChangeSets(conn: GrpcConnection, nodeName: string, signal: AbortSignal): AsyncGenerator<ChangeSet> {
  const req = toBinary(WatchReqSchema, create(WatchReqSchema, { NodeName: nodeName }));
  const asks = new Asks<Uint8Array>();
  asks.push(req);
  let batch: WireOp[] = [];
  let reset = false;
  let first = true;
  try {
    for await (const messages of conn.call("/localv1.Sets/Watch", asks, signal)) {
      for (const m of messages) {
        const op = decodeOpItem(m);
        // kpng clients honour Reset only as a stream's first op.
        if (op.op === "reset") reset ||= first && batch.length === 0;
        else if (op.op === "set" || op.op === "delete") batch.push(op);
        else if (op.op === "sync") {
          const cs: ChangeSet = { reset, ops: batch };
          batch = [];
          reset = false;
          first = false;
          yield cs;
          asks.push(req);
        }
      }
    }
  } finally {
    asks.end();
  }
}

/**
 * `globalv1.Sets.Watch` (the cluster-wide model) op by op, a DATA chunk's
 * worth at a time (Reset, Set, Delete and Sync as they come): for a consumer
 * that applies a whole model as it arrives rather than holding all its ops
 * and bytes until the Sync. The next GlobalWatchReq (an empty message) goes
 * out once the consumer has taken the chunk that held a Sync.
 */
export async function* globalOpChunks(conn: GrpcConnection, signal: AbortSignal): AsyncGenerator<WireOp[]> {
  const req = new Uint8Array(0);
  const asks = new Asks<Uint8Array>();
  asks.push(req);
  try {
    for await (const messages of conn.call("/globalv1.Sets/Watch", asks, signal)) {
      const ops: WireOp[] = [];
      let syncs = 0;
      for (const m of messages) {
        const op = decodeOpItem(m);
        if (op.op === "none") continue;
        if (op.op === "sync") syncs++;
        ops.push(op);
      }
      yield ops;
      for (let i = 0; i < syncs; i++) asks.push(req);
    }
  } finally {
    asks.end();
  }
}

/**
 * OpItem bytes -> op, without building messages: only Bytes matter and they
 * are decoded later, once, by whoever keeps the object. Hand-parsed because
 * a full state is 100,000+ of these and a generic decoder cost as much as
 * decoding the endpoints themselves; a test checks it against protobuf-es.
 * Field numbers: OpItem Sync=1 Set=2 Delete=3 Reset=4; Value Ref=1 Bytes=2;
 * Ref Set=1 Path=2. Unknown fields are skipped.
 */
export function decodeOpItem(b: Uint8Array): WireOp | { op: "none" } {
  const r = new Fields(Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength), 0, b.length);
  let out: WireOp | { op: "none" } = { op: "none" };
  while (r.next()) {
    if (r.wireType !== LEN) continue;
    if (r.field === 1) out = { op: "sync" };
    else if (r.field === 4) out = { op: "reset" };
    else if (r.field === 3) {
      const ref = decodeRef(r.buf, r.start, r.end);
      out = { op: "delete", set: ref.set, path: ref.path };
    } else if (r.field === 2) {
      let ref = { set: 0 as SetKind, path: "" };
      let bytes: Uint8Array = EMPTY;
      const v = new Fields(r.buf, r.start, r.end);
      while (v.next()) {
        if (v.wireType !== LEN) continue;
        if (v.field === 1) ref = decodeRef(v.buf, v.start, v.end);
        else if (v.field === 2) bytes = v.buf.subarray(v.start, v.end);
      }
      // no object spread here: it is measurably slow at 100,000 ops
      out = { op: "set", set: ref.set, path: ref.path, bytes };
    }
  }
  return out;
}

const EMPTY = new Uint8Array(0);

function decodeRef(buf: Buffer, start: number, end: number): { set: SetKind; path: string } {
  let set = 0 as SetKind;
  let path = "";
  const r = new Fields(buf, start, end);
  while (r.next()) {
    if (r.field === 1 && r.wireType === VARINT) set = r.value as SetKind;
    else if (r.field === 2 && r.wireType === LEN) path = buf.toString("utf8", r.start, r.end);
  }
  return { set, path };
}

export interface Snapshot {
  instanceID: bigint;
  rev: bigint;
  entries: Array<[string, SnapshotEntry]>;
}

/** One `Endpoints.Next` call: the server waits for a state newer than (instanceID, rev). */
export async function nextSnapshot(
  conn: GrpcConnection,
  filter: { instanceID: bigint; rev: bigint; nodeName: string },
  signal: AbortSignal,
): Promise<Snapshot> {
  const req = toBinary(
    NextFilterSchema,
    create(NextFilterSchema, { InstanceID: filter.instanceID, Rev: filter.rev, NodeName: filter.nodeName }),
  );
  let head: { instanceID: bigint; rev: bigint } | undefined;
  const entries: Array<[string, SnapshotEntry]> = [];
  for await (const messages of conn.call("/localv1.Endpoints/Next", once(req), signal)) {
    for (const m of messages) {
      const item = decodeNextItem(m);
      if (item.next) head = { instanceID: item.next.InstanceID, rev: item.next.Rev };
      if (item.entry) entries.push(item.entry);
    }
  }
  if (!head) throw new Error("Next: the stream ended without its Next item");
  return { ...head, entries };
}

/**
 * NextItem { Next=1: NextFilter; Endpoints=2: ServiceEndpoints{Service=1,
 * Endpoints=2, EndpointKeys=100} }, endpoints through the hand decoder (the
 * bulk of a full state), the rest through protobuf-es.
 */
function decodeNextItem(b: Uint8Array): { next?: NextFilter; entry?: [string, SnapshotEntry] } {
  const buf = Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  const out: { next?: NextFilter; entry?: [string, SnapshotEntry] } = {};
  const r = new Fields(buf, 0, buf.length);
  while (r.next()) {
    if (r.wireType !== LEN) continue;
    if (r.field === 1) out.next = fromBinary(NextFilterSchema, buf.subarray(r.start, r.end));
    else if (r.field !== 2) continue;
    let service: Service | undefined;
    const endpoints: Endpoint[] = [];
    const keys: string[] = [];
    const se = new Fields(buf, r.start, r.end);
    while (se.next()) {
      if (se.wireType !== LEN) continue;
      if (se.field === 1) service = fromBinary(ServiceSchema, buf.subarray(se.start, se.end));
      else if (se.field === 2) endpoints.push(decodeEndpoint(buf.subarray(se.start, se.end)));
      else if (se.field === 100) keys.push(buf.toString("utf8", se.start, se.end));
    }
    if (!service) continue;
    // Keys are a kpng addition; an older server's endpoints get positional ones.
    out.entry = [
      `${service.Namespace}/${service.Name}`,
      { service, endpoints: endpoints.map((ep, i): [string, Endpoint] => [keys[i] ?? `#${i}`, ep]) },
    ];
  }
  return out;
}

async function* once<T>(v: T): AsyncGenerator<T> {
  yield v;
}

/** The request side of a bidi stream, fed by push(). */
class Asks<T> {
  private queue: T[] = [];
  private waiting: (() => void) | null = null;
  private ended = false;

  push(v: T) {
    if (this.ended) return;
    this.queue.push(v);
    this.wake();
  }

  end() {
    this.ended = true;
    this.wake();
  }

  private wake() {
    const w = this.waiting;
    this.waiting = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    try {
      for (;;) {
        if (this.queue.length) yield this.queue.shift()!;
        else if (this.ended) return;
        else await new Promise<void>((resolve) => (this.waiting = resolve));
      }
    } finally {
      this.ended = true;
    }
  }
}
