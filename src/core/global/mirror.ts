// A node agent's copy of the global model: change sets of the globalv1
// stream in, the cluster events that bring the brain's index up to date out.
// Each item keeps a 53-bit hash of its wire bytes (not the bytes: they are
// views into the received chunks, and holding them kept megabytes of chunks
// alive), so a resent unchanged item (after a reconnect, to the same brain or
// another) makes no event: a resync costs the brain, and the backends behind
// it, only the real differences.

import { Set as SetKind } from "../../gen/localv1/services_pb.ts";
import type { ChangeSet } from "../api/client/replica.ts";
import type { WireOp } from "../api/server/wire.ts";
import type { ClusterEvent } from "../brain/cluster.ts";
import type { K8sObject } from "../brain/k8s/objects.ts";
import { errorMessage } from "../errors.ts";
import { decodeEndpointInfo, decodeNodeInfo, decodeServiceInfo, sliceOf, type SliceInfo } from "./decode.ts";
import { hash53, splitGlobalPath } from "./encode.ts";

type SliceEndpoint = ReturnType<typeof decodeEndpointInfo>["endpoint"];
type SetOp = Extract<WireOp, { op: "set" }>;

interface SliceItems {
  /** from the latest EndpointInfo (all of a slice's carry the same) */
  info: SliceInfo;
  /** endpoint key (the path's last part, the IP) -> the hash of its bytes, and the decoded entry */
  endpoints: Map<string, { hash: number; endpoint: SliceEndpoint }>;
}

export class GlobalMirror {
  /** path -> hash of the item's bytes */
  private readonly services = new Map<string, number>();
  private readonly nodes = new Map<string, number>();
  /** `ns|svc|slice` -> its endpoints */
  private readonly slices = new Map<string, SliceItems>();
  private events: ClusterEvent[] = [];
  private touched = new Set<string>();
  private stale: { services: Set<string>; nodes: Set<string>; slices: Map<string, Set<string>> } | null = null;
  /** Set and Delete ops since begin() */
  opsInSet = 0;
  /** counters: items decoded, items resent unchanged */
  readonly stats = { decoded: 0, unchanged: 0 };

  get size() {
    let eps = 0;
    for (const s of this.slices.values()) eps += s.endpoints.size;
    return { services: this.services.size, nodes: this.nodes.size, endpoints: eps };
  }

  /**
   * One complete change set -> events (begin, every op, end). After a Reset,
   * whatever the new stream did not send again is gone. `onBad` hears items
   * that do not decode (skipped; the rest of the change set applies).
   */
  apply(cs: ChangeSet, onBad: (error: string) => void): ClusterEvent[] {
    this.begin(cs.reset);
    for (const op of cs.ops) this.op(op, onBad);
    return this.end();
  }

  /**
   * Starts a change set; after a Reset (a new stream) every item not sent
   * again by its end is gone. Ops may then be applied one by one as they
   * arrive (a whole model need not be held). A change set cut short by a
   * broken stream is not lost: its events wait for the next end().
   */
  begin(reset: boolean): void {
    this.opsInSet = 0;
    this.stale = reset ? { services: new Set(this.services.keys()), nodes: new Set(this.nodes.keys()), slices: this.allEndpointPaths() } : null;
  }

  op(op: WireOp, onBad: (error: string) => void): void {
    this.opsInSet++;
    try {
      if (op.op === "set") {
        if (op.set === SetKind.GlobalServiceInfos) this.setItem(this.services, this.stale?.services, op, decodeServiceInfo);
        else if (op.set === SetKind.GlobalNodeInfos) this.setItem(this.nodes, this.stale?.nodes, op, decodeNodeInfo);
        else if (op.set === SetKind.GlobalEndpointInfos) this.setEndpoint(op);
      } else if (op.op === "delete") {
        if (op.set === SetKind.GlobalServiceInfos) this.deleteService(op.path, this.events);
        else if (op.set === SetKind.GlobalNodeInfos) this.deleteNode(op.path, this.events);
        else if (op.set === SetKind.GlobalEndpointInfos) this.deleteEndpoint(...splitEndpointPath(op.path), this.touched);
      }
    } catch (err) {
      onBad(errorMessage(err));
    }
  }

  /** A service or node item: decoded into an upsert unless its bytes hash as before. */
  private setItem(items: Map<string, number>, stale: Set<string> | undefined, op: SetOp, decode: (bytes: Uint8Array, path: string) => K8sObject) {
    stale?.delete(op.path);
    const hash = hash53(op.bytes);
    if (items.get(op.path) === hash) {
      this.stats.unchanged++;
      return;
    }
    this.events.push({ type: "upsert", object: decode(op.bytes, op.path) });
    items.set(op.path, hash);
    this.stats.decoded++;
  }

  /** An endpoint item: kept in its slice, which end() rebuilds once. */
  private setEndpoint(op: SetOp) {
    const [id, key] = splitEndpointPath(op.path);
    this.stale?.slices.get(id)?.delete(key);
    let slice = this.slices.get(id);
    const hash = hash53(op.bytes);
    if (slice?.endpoints.get(key)?.hash === hash) {
      this.stats.unchanged++;
      return;
    }
    const { slice: info, endpoint } = decodeEndpointInfo(op.bytes, op.path);
    if (!slice) this.slices.set(id, (slice = { info, endpoints: new Map() }));
    // Every endpoint carries its slice's ports: keep one copy.
    else if (!samePorts(slice.info.ports, info.ports) || slice.info.family !== info.family) slice.info = info;
    // The key is the endpoint's IP: keep the string the endpoint holds, not a second copy.
    slice.endpoints.set(endpoint.addresses[0] === key ? endpoint.addresses[0] : key, { hash, endpoint });
    this.touched.add(id);
    this.stats.decoded++;
  }

  /** Ends a change set: the events since the last end(), slices rebuilt once each. */
  end(): ClusterEvent[] {
    const events = this.events;
    const touched = this.touched;
    const stale = this.stale;
    this.events = [];
    this.touched = new Set();
    this.stale = null;
    if (stale) {
      for (const p of stale.services) this.deleteService(p, events);
      for (const p of stale.nodes) this.deleteNode(p, events);
      for (const [id, keys] of stale.slices) for (const key of keys) this.deleteEndpoint(id, key, touched);
    }
    // The brain's index knows a slice by namespace and name only: a slice that
    // moved to another service is deleted under the old one first, then set.
    const upserts: ClusterEvent[] = [];
    for (const id of touched) {
      const [ns, , name] = splitGlobalPath(id + "|");
      const slice = this.slices.get(id);
      if (!slice?.endpoints.size) {
        this.slices.delete(id);
        events.push({ type: "delete", kind: "EndpointSlice", namespace: ns, name });
      } else upserts.push({ type: "upsert", object: sliceOf(slice.info, [...slice.endpoints.values()].map((e) => e.endpoint)) });
    }
    events.push(...upserts);
    return events;
  }

  private allEndpointPaths(): Map<string, Set<string>> {
    const out = new Map<string, Set<string>>();
    for (const [id, s] of this.slices) out.set(id, new Set(s.endpoints.keys()));
    return out;
  }

  private deleteService(path: string, events: ClusterEvent[]) {
    if (!this.services.delete(path)) return;
    const [namespace, name] = splitGlobalPath(path);
    events.push({ type: "delete", kind: "Service", namespace, name });
  }

  private deleteNode(path: string, events: ClusterEvent[]) {
    if (!this.nodes.delete(path)) return;
    events.push({ type: "delete", kind: "Node", namespace: "", name: splitGlobalPath(path)[1] });
  }

  private deleteEndpoint(id: string, key: string, touched: Set<string>) {
    if (this.slices.get(id)?.endpoints.delete(key)) touched.add(id);
  }
}

const samePorts = (a: SliceInfo["ports"], b: SliceInfo["ports"]) => a.length === b.length && a.every((p, i) => p.name === b[i].name && p.port === b[i].port);

/** `ns|svc|slice|key` -> [`ns|svc|slice`, `key`] */
function splitEndpointPath(path: string): [string, string] {
  const i = path.lastIndexOf("|");
  return [path.slice(0, i), path.slice(i + 1)];
}
