// `/localv1.Sets/Watch`: the kpng-compatible diff stream. Each WatchReq asks
// for one change set; the first is answered with Reset. A change set is the
// ordered ops between what this stream was last sent and the current state,
// closed by Sync, and never empty: a revision that nets to nothing for this
// stream is not sent.

import { Code, ConnectError } from "@connectrpc/connect";
import { Set as SetKind, type WatchReq } from "../../../gen/localv1/services_pb.ts";
import type { NodeView } from "../../brain/brain.ts";
import { stateOps } from "../../brain/ops.ts";
import type { ServiceEndpoints } from "../../brain/state.ts";
import { Wake } from "./stream-wakeup.ts";
import { sameBytes, type WireOp } from "../../wire/ops.ts";
import type { WireCache } from "./wire.ts";

type Services = ReadonlyMap<string, ServiceEndpoints>;

/**
 * Ops between two snapshots, as wire ops (without the closing Sync). An
 * object that is new but marshals to the bytes this stream already has (an
 * endpoint that went away and came back between two asks) is not resent.
 */
export function wireOps(prev: Services, next: Services, keys: Iterable<string> | null, cache: WireCache): WireOp[] {
  const out: WireOp[] = [];
  for (const op of stateOps(prev, next, keys)) {
    if (op.op === "setService") {
      const bytes = cache.service(op.service);
      const old = prev.get(op.key)?.service;
      if (!old || !sameBytes(cache.service(old), bytes)) out.push({ op: "set", set: SetKind.ServicesSet, path: op.key, bytes });
    } else if (op.op === "setEndpoint") {
      const bytes = cache.endpoint(op.endpoint);
      const old = prev.get(op.key)?.endpoints.get(op.endpointKey);
      if (!old || !sameBytes(cache.endpoint(old), bytes))
        out.push({ op: "set", set: SetKind.EndpointsSet, path: `${op.key}/${op.endpointKey}`, bytes });
    } else if (op.op === "deleteEndpoint") out.push({ op: "delete", set: SetKind.EndpointsSet, path: `${op.key}/${op.endpointKey}` });
    else out.push({ op: "delete", set: SetKind.ServicesSet, path: op.key });
  }
  return out;
}

/** What one stream has been sent, and what changed in its view since. */
export class WatchStream {
  private sent: Services = new Map();
  private latest: Services | null = null;
  /** services changed since the last change set; null = compare everything */
  private dirty: Set<string> | null = null;
  private readonly wake: Wake;
  private readonly unsubscribe: () => void;

  constructor(
    readonly view: NodeView,
    private readonly cache: WireCache,
    signal: AbortSignal,
  ) {
    this.wake = new Wake(signal);
    this.unsubscribe = view.subscribe((rev) => {
      this.latest = rev.state.services;
      if (rev.change === null) this.dirty = null;
      else if (this.dirty) for (const k of rev.change) this.dirty.add(k);
      this.wake.wake();
    });
  }

  /** The next non-empty change set, ending with Sync; waits for a change. */
  async next(): Promise<WireOp[]> {
    for (;;) {
      if (this.latest && (this.dirty === null || this.dirty.size > 0)) {
        const next = this.latest;
        const ops = wireOps(this.sent, next, this.dirty, this.cache);
        this.sent = next;
        this.dirty = new Set();
        if (ops.length) {
          ops.push({ op: "sync" });
          return ops;
        }
      }
      await this.wake.wait();
    }
  }

  close(): void {
    this.unsubscribe();
  }
}

export interface WatchDeps {
  /** the view of a node name, after the brain synced; throws a ConnectError for an unknown node */
  view(nodeName: string, signal: AbortSignal): Promise<NodeView>;
  cache: WireCache;
}

/** `Sets.Watch` as batches of ops: Reset alone first, then one change set per WatchReq. */
export async function* watchBatches(deps: WatchDeps, reqs: AsyncIterable<WatchReq>, signal: AbortSignal): AsyncGenerator<WireOp[]> {
  let stream: WatchStream | undefined;
  try {
    for await (const req of reqs) {
      if (!req.NodeName) throw new ConnectError("WatchReq.NodeName: must not be empty", Code.InvalidArgument);
      if (!stream) {
        const view = await deps.view(req.NodeName, signal);
        stream = new WatchStream(view, deps.cache, signal);
        yield [{ op: "reset" }];
      } else if (req.NodeName !== stream.view.nodeName) {
        throw new ConnectError(
          `WatchReq.NodeName: "${req.NodeName}" differs from "${stream.view.nodeName}" earlier in this stream`,
          Code.InvalidArgument,
        );
      }
      yield await stream.next();
    }
  } finally {
    stream?.close();
  }
}
