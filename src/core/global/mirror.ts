// A node agent's copy of the global model: change sets of the globalv1
// stream in, the cluster events that bring the brain's index up to date out.
// Each item keeps a 53-bit hash of its wire bytes (not the bytes: they are
// views into the received chunks, and holding them kept megabytes of chunks
// alive), so a resent unchanged item (after a reconnect, to the same brain or
// another) makes no event: a resync costs the brain, and the backends behind
// it, only the real differences.

import { Set as SetKind } from "../../gen/localv1/services_pb.ts";
import type { ChangeSet, WireOp } from "../wire/ops.ts";
import type { ClusterEvent } from "../brain/cluster.ts";
import type { K8sObject } from "../brain/k8s/objects.ts";
import { errorMessage } from "../errors.ts";
import { decodeEndpointInfo, decodeNodeInfo, decodeServiceInfo, sliceOf, type SliceInfo } from "./decode.ts";
import { hash53 } from "../wire/item-hash.ts";
import { splitGlobalPath } from "./encode.ts";

type SliceEndpoint = ReturnType<typeof decodeEndpointInfo>["endpoint"];
type SetOp = Extract<WireOp, { op: "set" }>;

/**
 * One slice's endpoints as parallel arrays in arrival order: an object and a
 * Map entry per endpoint cost more heap than the whole difference between an
 * agent and a full binary (see docs/results/2026-11.md). `endpoints` is the
 * very array the brain's slice holds (one copy, not two): the first change to
 * a slice in a change set copies it (see own()), so the brain's slice never
 * changes under it.
 */
interface SliceItems {
  /** from the latest EndpointInfo (all of a slice's carry the same) */
  info: SliceInfo;
  endpoints: SliceEndpoint[];
  /** hashes[i]: hash of endpoints[i]'s bytes */
  hashes: number[];
  /** keys[i]: endpoints[i]'s key (the path's last part); null while every key is its endpoint's IP, as kpng's brains send them */
  keys: string[] | null;
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
  /** items resent unchanged since begin() */
  unchangedInSet = 0;
  /** counters: items decoded, items resent unchanged */
  readonly stats = { decoded: 0, unchanged: 0 };

  get size() {
    let eps = 0;
    for (const s of this.slices.values()) eps += s.endpoints.length;
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
    this.unchangedInSet = 0;
    this.stale = reset
      ? { services: new Set(this.services.keys()), nodes: new Set(this.nodes.keys()), slices: this.allEndpointPaths() }
      : null;
  }

  op(op: WireOp, onBad: (error: string) => void): void {
    this.opsInSet++;
    try {
      if (op.op === "set") {
        if (op.set === SetKind.GlobalServiceInfos) this.setItem(this.services, this.stale?.services, op, decodeServiceInfo);
        else if (op.set === SetKind.GlobalNodeInfos) this.setItem(this.nodes, this.stale?.nodes, op, decodeNodeInfo);
        else if (op.set === SetKind.GlobalEndpointInfos) this.setEndpoint(op);
      } else if (op.op === "delete") {
        if (op.set === SetKind.GlobalServiceInfos) this.deleteService(op.path);
        else if (op.set === SetKind.GlobalNodeInfos) this.deleteNode(op.path);
        else if (op.set === SetKind.GlobalEndpointInfos) this.deleteEndpoint(...splitEndpointPath(op.path));
      }
    } catch (err) {
      onBad(errorMessage(err));
    }
  }

  /** A service or node item: decoded into an upsert unless its bytes hash as before. */
  private setItem(
    items: Map<string, number>,
    stale: Set<string> | undefined,
    op: SetOp,
    decode: (bytes: Uint8Array, path: string) => K8sObject,
  ) {
    stale?.delete(op.path);
    const hash = hash53(op.bytes);
    if (items.get(op.path) === hash) {
      this.stats.unchanged++;
      this.unchangedInSet++;
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
    const at = slice ? indexOf(slice, key) : -1;
    if (at >= 0 && slice!.hashes[at] === hash) {
      this.stats.unchanged++;
      this.unchangedInSet++;
      return;
    }
    const { slice: info, endpoint } = decodeEndpointInfo(op.bytes, op.path);
    if (!slice) {
      this.slices.set(id, (slice = { info, endpoints: [], hashes: [], keys: null }));
      this.touched.add(id);
    } else {
      this.own(id, slice);
      // Every endpoint carries its slice's ports: keep one copy.
      if (!samePorts(slice.info.ports, info.ports) || slice.info.family !== info.family) slice.info = info;
    }
    const i = at >= 0 ? at : slice.endpoints.length;
    slice.endpoints[i] = endpoint;
    slice.hashes[i] = hash;
    if (slice.keys) slice.keys[i] = key;
    else if (endpoint.addresses[0] !== key) {
      slice.keys = slice.endpoints.map((e) => e.addresses[0]);
      slice.keys[i] = key;
    }
    this.stats.decoded++;
  }

  /** Before a slice's first change in a change set: its own endpoints array (the brain holds the one end() gave it). */
  private own(id: string, slice: SliceItems) {
    if (this.touched.has(id)) return;
    slice.endpoints = slice.endpoints.slice();
    this.touched.add(id);
  }

  /** Ends a change set: the events since the last end(), slices rebuilt once each. */
  end(): ClusterEvent[] {
    const stale = this.stale;
    this.stale = null;
    if (stale) {
      for (const p of stale.services) this.deleteService(p);
      for (const p of stale.nodes) this.deleteNode(p);
      for (const [id, keys] of stale.slices) if (keys.size) this.deleteEndpoints(id, keys);
    }
    const events = this.events;
    const touched = this.touched;
    this.events = [];
    this.touched = new Set();
    // The brain's index knows a slice by namespace and name only: a slice that
    // moved to another service is deleted under the old one first, then set.
    const upserts: ClusterEvent[] = [];
    for (const id of touched) {
      const [ns, , name] = splitGlobalPath(id + "|");
      const slice = this.slices.get(id);
      if (!slice?.endpoints.length) {
        this.slices.delete(id);
        events.push({ type: "delete", kind: "EndpointSlice", namespace: ns, name });
      } else upserts.push({ type: "upsert", object: sliceOf(slice.info, slice.endpoints) });
    }
    events.push(...upserts);
    return events;
  }

  private allEndpointPaths(): Map<string, Set<string>> {
    const out = new Map<string, Set<string>>();
    for (const [id, s] of this.slices) out.set(id, new Set(s.keys ?? s.endpoints.map((e) => e.addresses[0])));
    return out;
  }

  private deleteService(path: string) {
    if (!this.services.delete(path)) return;
    const [namespace, name] = splitGlobalPath(path);
    this.events.push({ type: "delete", kind: "Service", namespace, name });
  }

  private deleteNode(path: string) {
    if (!this.nodes.delete(path)) return;
    this.events.push({ type: "delete", kind: "Node", namespace: "", name: splitGlobalPath(path)[1] });
  }

  private deleteEndpoint(id: string, key: string) {
    this.deleteEndpoints(id, new Set([key]));
  }

  private deleteEndpoints(id: string, keys: ReadonlySet<string>) {
    const slice = this.slices.get(id);
    if (!slice) return;
    const gone = slice.endpoints.map((e, i) => keys.has(slice.keys?.[i] ?? e.addresses[0]));
    if (!gone.includes(true)) return;
    this.own(id, slice);
    const keep = (_: unknown, i: number) => !gone[i];
    slice.keys = slice.keys?.filter(keep) ?? null;
    slice.hashes = slice.hashes.filter(keep);
    slice.endpoints = slice.endpoints.filter(keep);
  }
}

/** The index of the endpoint with this key, or -1. */
function indexOf(slice: SliceItems, key: string): number {
  if (slice.keys) return slice.keys.indexOf(key);
  const eps = slice.endpoints;
  for (let i = 0; i < eps.length; i++) if (eps[i].addresses[0] === key) return i;
  return -1;
}

const samePorts = (a: SliceInfo["ports"], b: SliceInfo["ports"]) =>
  a.length === b.length && a.every((p, i) => p.name === b[i].name && p.port === b[i].port);

/** `ns|svc|slice|key` -> [`ns|svc|slice`, `key`] */
function splitEndpointPath(path: string): [string, string] {
  const i = path.lastIndexOf("|");
  return [path.slice(0, i), path.slice(i + 1)];
}
