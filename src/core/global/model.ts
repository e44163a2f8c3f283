// The cluster-wide model as globalv1 bytes, kept up to date from the brain:
// one immutable snapshot per brain flush, shared by every global stream.
// Memory grows with the cluster, not with the number of node agents: a
// stream holds a reference to the snapshot it last sent and the keys that
// changed since, never a copy. Unchanged items keep their Uint8Array from
// one snapshot to the next, so a diff compares by identity and costs what
// changed.

import type { Brain } from "../brain/brain.ts";
import type { Touched } from "../brain/cluster.ts";
import { ShardedMap } from "../brain/sharded-map.ts";
import { splitServiceKey } from "../brain/state.ts";
import { sameBytes } from "../wire/ops.ts";
import { encodeNodeInfo, encodeServiceInfo, encodeSlice, globalPath } from "./encode.ts";

export interface GlobalService {
  readonly service: Uint8Array;
  /** endpoint path -> EndpointInfo bytes */
  readonly endpoints: ReadonlyMap<string, Uint8Array>;
}

export interface GlobalSnapshot {
  readonly rev: number;
  /** keyed by `ns/name` (the brain's service key) */
  readonly services: ShardedMap<GlobalService>;
  /** keyed by node name */
  readonly nodes: ShardedMap<Uint8Array>;
}

/** What changed between two snapshots; null = everything. */
export type GlobalChange = { services: ReadonlySet<string>; nodes: ReadonlySet<string> } | null;

type Listener = (snap: GlobalSnapshot, change: GlobalChange) => void;

/**
 * How many recent snapshots' changes are kept: a stream that fell further
 * behind compares everything, which costs O(cluster) identity checks, once,
 * shared by every stream that was sent the same snapshot.
 */
const CHANGE_LOG = 64;

export class GlobalModel {
  snapshot: GlobalSnapshot | null = null;
  private readonly listeners = new Set<Listener>();
  /** the changes of the latest snapshots, oldest first: log[i] made rev `snapshot.rev - log.length + 1 + i` */
  private readonly log: Array<{ services: ReadonlySet<string>; nodes: ReadonlySet<string> }> = [];
  private readonly stopFlush: () => void;
  /** counters: items encoded (work done) */
  readonly stats = { encoded: 0 };

  constructor(private readonly brain: Brain) {
    this.stopFlush = brain.onFlush((t) => this.update(t));
    if (brain.isSynced) this.update(null);
  }

  /** Called with every new snapshot; at once with the current one (change null) if there is one. */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    if (this.snapshot) fn(this.snapshot, null);
    return () => this.listeners.delete(fn);
  }

  /**
   * What changed between `from` and the current snapshot (null: compare
   * everything). Streams keep no change sets of their own: what each
   * stream skipped is read here when it asks.
   */
  changesSince(from: GlobalSnapshot): GlobalChange {
    const cur = this.snapshot;
    if (!cur) return null;
    const behind = cur.rev - from.rev;
    if (behind <= 0 || behind > this.log.length) return null;
    const entries = this.log.slice(this.log.length - behind);
    if (entries.length === 1) return entries[0];
    const services = new Set<string>();
    const nodes = new Set<string>();
    for (const e of entries) {
      for (const k of e.services) services.add(k);
      for (const n of e.nodes) nodes.add(n);
    }
    return { services, nodes };
  }

  close(): void {
    this.stopFlush();
    this.listeners.clear();
  }

  /** touched null = everything (the first snapshot) */
  private update(touched: Touched | null): void {
    const prev = this.snapshot;
    const index = this.brain.cluster;
    const svcKeys =
      touched && prev
        ? new Set([...touched.services, ...touched.endpoints])
        : new Set([...index.services.keys(), ...(prev?.services.keys() ?? [])]);
    const nodeNames = touched && prev ? touched.nodes : new Set([...index.nodes.keys(), ...(prev?.nodes.keys() ?? [])]);
    const services = new Map<string, GlobalService | null>();
    for (const key of svcKeys) {
      const old = prev?.services.get(key);
      const next = this.encodeService(key, old);
      if (next !== old) services.set(key, next ?? null);
    }
    const nodes = new Map<string, Uint8Array | null>();
    for (const name of nodeNames) {
      const old = prev?.nodes.get(name);
      const node = index.nodes.get(name);
      if (!node) {
        if (old) nodes.set(name, null);
        continue;
      }
      const bytes = encodeNodeInfo(node);
      this.stats.encoded++;
      if (!old || !sameBytes(old, bytes)) nodes.set(name, bytes);
    }
    if (prev && services.size === 0 && nodes.size === 0) return;
    const snap: GlobalSnapshot = {
      rev: (prev?.rev ?? 0) + 1,
      services: (prev?.services ?? ShardedMap.empty<GlobalService>()).with(services),
      nodes: (prev?.nodes ?? ShardedMap.empty<Uint8Array>()).with(nodes),
    };
    this.snapshot = snap;
    const change: GlobalChange = prev ? { services: new Set(services.keys()), nodes: new Set(nodes.keys()) } : null;
    if (change) {
      this.log.push(change);
      if (this.log.length > CHANGE_LOG) this.log.shift();
    } else this.log.length = 0;
    for (const fn of this.listeners) fn(snap, change);
  }

  /** One service's items, sharing `old`'s bytes where equal; `old` itself when nothing changed. */
  private encodeService(key: string, old: GlobalService | undefined): GlobalService | undefined {
    const entry = this.brain.entry(key);
    if (!entry) return undefined;
    let service = encodeServiceInfo(entry.model);
    this.stats.encoded++;
    let changed = !old || !sameBytes(old.service, service);
    if (!changed) service = old!.service;
    const fresh = new Map<string, Uint8Array>();
    for (const slice of this.brain.cluster.slices.get(key)?.values() ?? []) encodeSlice(slice, entry.families, fresh);
    this.stats.encoded += fresh.size;
    const endpoints = new Map<string, Uint8Array>();
    for (const [path, bytes] of fresh) {
      const o = old?.endpoints.get(path);
      if (o && sameBytes(o, bytes)) endpoints.set(path, o);
      else {
        endpoints.set(path, bytes);
        changed = true;
      }
    }
    if (old && old.endpoints.size !== endpoints.size) changed = true;
    return changed ? { service, endpoints } : old;
  }
}

export const servicePath = (key: string) => globalPath(...splitServiceKey(key));
export const nodePath = (name: string) => globalPath("", name);
