// `/globalv1.Sets/Watch`: the cluster-wide model as a kpng diff stream, for
// node agents. Same flow control as localv1 Watch: each GlobalWatchReq asks
// for one change set, the first is answered with Reset, a change set is
// closed by Sync and never empty. Order within a change set (kpng's): node,
// service, endpoint sets; then endpoint, service, node deletes.
//
// Every stream reads the one shared GlobalModel snapshot. A new stream's
// first change set is the whole snapshot: its ops (and, on the fast path,
// its framed bytes) are built once per snapshot and shared by every stream
// that starts on it, so 1,000 agents reconnecting at once cost one encoding.

import { Set as SetKind } from "../../../gen/localv1/services_pb.ts";
import type { GlobalChange, GlobalModel, GlobalSnapshot } from "../../global/model.ts";
import { nodePath, servicePath } from "../../global/model.ts";
import { Wake } from "./stream-wakeup.ts";
import type { WireOp } from "../../wire/ops.ts";

/** Ops turning `prev` into `next`, looking only at the changed keys when given. */
export function globalOps(prev: GlobalSnapshot | null, next: GlobalSnapshot, changed: GlobalChange): WireOp[] {
  const svcKeys = changed?.services ?? new Set([...(prev?.services.keys() ?? []), ...next.services.keys()]);
  const nodeNames = changed?.nodes ?? new Set([...(prev?.nodes.keys() ?? []), ...next.nodes.keys()]);
  const nodeSets: WireOp[] = [];
  const nodeDels: WireOp[] = [];
  const svcSets: WireOp[] = [];
  const svcDels: WireOp[] = [];
  const epSets: WireOp[] = [];
  const epDels: WireOp[] = [];
  for (const name of nodeNames) {
    const a = prev?.nodes.get(name);
    const b = next.nodes.get(name);
    if (a === b) continue;
    if (b) nodeSets.push({ op: "set", set: SetKind.GlobalNodeInfos, path: nodePath(name), bytes: b });
    else nodeDels.push({ op: "delete", set: SetKind.GlobalNodeInfos, path: nodePath(name) });
  }
  for (const key of svcKeys) {
    const a = prev?.services.get(key);
    const b = next.services.get(key);
    if (a === b) continue;
    if (b && a?.service !== b.service)
      svcSets.push({ op: "set", set: SetKind.GlobalServiceInfos, path: servicePath(key), bytes: b.service });
    if (b)
      for (const [path, bytes] of b.endpoints)
        if (a?.endpoints.get(path) !== bytes) epSets.push({ op: "set", set: SetKind.GlobalEndpointInfos, path, bytes });
    if (a)
      for (const path of a.endpoints.keys())
        if (!b?.endpoints.has(path)) epDels.push({ op: "delete", set: SetKind.GlobalEndpointInfos, path });
    if (a && !b) svcDels.push({ op: "delete", set: SetKind.GlobalServiceInfos, path: servicePath(key) });
  }
  return [...nodeSets, ...svcSets, ...epSets, ...epDels, ...svcDels, ...nodeDels];
}

/** The whole snapshot as one change set (with its Sync), built once per snapshot. */
const fullSets = new WeakMap<GlobalSnapshot, WireOp[]>();
/** change sets sent to many streams, and their framed bytes */
const shared = new WeakSet<readonly WireOp[]>();
const framed = new WeakMap<readonly WireOp[], Buffer>();
function fullChangeSet(snap: GlobalSnapshot): WireOp[] {
  let ops = fullSets.get(snap);
  if (!ops) {
    ops = globalOps(null, snap, null);
    ops.push({ op: "sync" });
    fullSets.set(snap, ops);
    shared.add(ops);
  }
  return ops;
}

/**
 * The change set from one snapshot to another. Streams that were sent the
 * same snapshot have seen the same changes since, so the first stream to
 * ask builds it (ops and, on the fast path, framed bytes) for all of them:
 * one endpoint change to 1,000 agents is one diff, one framing, 1,000 writes.
 */
const transitions = new WeakMap<GlobalSnapshot, { next: GlobalSnapshot; ops: WireOp[] }>();
function transition(from: GlobalSnapshot, to: GlobalSnapshot, changed: () => GlobalChange): WireOp[] {
  const t = transitions.get(from);
  if (t?.next === to) return t.ops;
  const ops = globalOps(from, to, changed());
  if (ops.length) ops.push({ op: "sync" });
  transitions.set(from, { next: to, ops });
  shared.add(ops);
  return ops;
}

/** What one global stream has been sent; what changed since is the model's to say. */
export class GlobalStream {
  private sent: GlobalSnapshot | null = null;
  private readonly wake: Wake;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly model: GlobalModel,
    signal: AbortSignal,
  ) {
    this.wake = new Wake(signal);
    // Called for every stream at every flush: it only wakes (see stream-wakeup.ts).
    this.unsubscribe = model.subscribe(() => this.wake.wake());
  }

  /** The next non-empty change set, ending with Sync; waits for a change. */
  async next(): Promise<WireOp[]> {
    for (;;) {
      const next = this.model.snapshot;
      if (next && next !== this.sent) {
        // A full change set is never empty (it ends with Sync); a transition may net to nothing.
        const ops = this.sent === null ? fullChangeSet(next) : transition(this.sent, next, () => this.model.changesSince(this.sent!));
        this.sent = next;
        if (ops.length) return ops;
      }
      await this.wake.wait();
    }
  }

  close(): void {
    this.unsubscribe();
  }
}

/** `globalv1.Sets.Watch` as batches of ops: Reset alone first, then one change set per GlobalWatchReq. */
export async function* globalWatchBatches(
  model: () => Promise<GlobalModel>,
  reqs: AsyncIterable<unknown>,
  signal: AbortSignal,
): AsyncGenerator<WireOp[]> {
  let stream: GlobalStream | undefined;
  try {
    for await (const _req of reqs) {
      if (!stream) {
        stream = new GlobalStream(await model(), signal);
        yield [{ op: "reset" }];
      }
      yield await stream.next();
    }
  } finally {
    stream?.close();
  }
}

/**
 * A change set as gRPC-framed bytes; the shared ones (a whole snapshot, a
 * transition between two snapshots) are framed once for every stream that
 * sends them. Others (localv1's, per node) are framed each time.
 */
export function frameChangeSet(ops: readonly WireOp[], frame: (ops: readonly WireOp[]) => Buffer): Buffer {
  if (!shared.has(ops)) return frame(ops);
  let b = framed.get(ops);
  if (!b) framed.set(ops, (b = frame(ops)));
  return b;
}
