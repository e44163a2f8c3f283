// The brain: cluster events in, revisioned node-local states out. It never
// publishes a partial state (no revision before every kind has synced) and
// publishes a new revision only when a node's result changed. Work grows with
// the change: an event marks the services it touched, and a flush recomputes
// only those, for every node name being served.

import type { Endpoint, Service } from "../../gen/localv1/services_pb.ts";
import { ClusterIndex, newTouched, type ClusterEvent, type ClusterView, type Touched } from "./cluster.ts";
import type { Family } from "../net/ip.ts";
import { DropCounts, kinds, type K8sService, type Kind } from "./k8s/objects.ts";
import { EndpointMap } from "./endpoint-map.ts";
import { candidates, endpointsModel, sameEndpoint } from "./model/endpoints.ts";
import { externalPolicyLocal, internalPolicyLocal, isProxied, serviceModel } from "./model/service.ts";
import { clusterIPsByFamily } from "./k8s/read.ts";
import type { NodeInfo } from "./model/topology.ts";
import { nodeIPs, sameIPs } from "./node-ips.ts";
import { sameService } from "./same-service.ts";
import { ShardedMap } from "./sharded-map.ts";
import type { NodeState, ServiceEndpoints, StateChange } from "./state.ts";

export const ZONE_LABEL = "topology.kubernetes.io/zone";

export interface Revision {
  state: NodeState;
  /** services changed since the previous revision; null on the first and when the node's IPs changed */
  change: StateChange;
}

export interface BrainOptions {
  serviceProxyName?: string;
  /** the operator's IPs for its own node (Config.nodeName, Config.nodeIPs): they win over that Node's for their families */
  nodeIPOverride?: { node: string; ips: readonly string[] };
}

type Listener = (rev: Revision) => void;

/** The per-service, node-independent part, computed once per change for all node views. */
interface ServiceEntry {
  model: Service;
  families: ReadonlySet<Family>;
  internalLocal: boolean;
  externalLocal: boolean;
  external: boolean;
}

export class Brain {
  private readonly index = new ClusterIndex();
  private readonly synced = new Set<Kind>();
  /** every kind synced: asked for each event of the first lists, so kept rather than worked out */
  private allSynced = false;
  private readonly entries = new Map<string, ServiceEntry | null>();
  private readonly views = new Map<string, NodeView>();
  private pending: Touched = newTouched();
  private readonly flushListeners = new Set<(touched: Touched) => void>();
  private readonly serviceProxyName: string;
  private readonly nodeIPOverride: { node: string; ips: readonly string[] } | undefined;
  /** counters: events in, revisions out, services recomputed (work done) */
  readonly stats = { events: 0, revisions: 0, computed: 0 };
  /** objects the sources refused (they count them here, beside the events they apply) */
  readonly dropped = new DropCounts();

  /** the cluster objects read so far, for reading only */
  get cluster(): ClusterView {
    return this.index;
  }

  constructor(opts: BrainOptions = {}) {
    this.serviceProxyName = opts.serviceProxyName ?? "";
    this.nodeIPOverride = opts.nodeIPOverride;
  }

  apply(events: Iterable<ClusterEvent>): void {
    for (const ev of events) this.applyEvent(ev);
  }

  /** apply() of one event (a list's objects come one at a time) */
  applyEvent(ev: ClusterEvent): void {
    this.stats.events++;
    // Only a Service object change alters the node-independent model; slice changes reuse it.
    const key = this.index.apply(ev, this.pending);
    if (key === null) return;
    this.entries.delete(key);
    // Before the first state, a service's model is made as it arrives: the lists come
    // page by page, with waits between, and the first state then has that much less to do.
    if (ev.type === "upsert" && !this.allSynced) this.entry(key);
  }

  markSynced(kind: Kind): void {
    this.synced.add(kind);
    this.allSynced = kinds.every((k) => this.synced.has(k));
  }

  get isSynced(): boolean {
    return this.allSynced;
  }

  /** The view of one node name, created on first use. */
  view(nodeName: string): NodeView {
    let v = this.views.get(nodeName);
    if (!v) {
      v = new NodeView(this, nodeName);
      this.views.set(nodeName, v);
      if (this.isSynced) v.recompute(null);
    }
    return v;
  }

  /** Recompute what the pending events touched and publish new revisions. */
  flush(): void {
    if (!this.isSynced) return;
    const touched = this.pending;
    this.pending = newTouched();
    for (const fn of this.flushListeners) fn(touched);
    const keys = new Set([...touched.services, ...touched.endpoints]);
    for (const v of this.views.values()) {
      // A Node update touches every service only when it moved the node's zone (topology hints).
      const all = v.state === null || (touched.nodes.has(v.nodeName) && this.nodeInfo(v.nodeName).zone !== v.zone);
      v.recompute(all ? null : keys);
    }
  }

  /**
   * Called after each synced flush with what it touched, once the models
   * of touched services are stale (the global model re-encodes from there).
   */
  onFlush(fn: (touched: Touched) => void): () => void {
    this.flushListeners.add(fn);
    return () => this.flushListeners.delete(fn);
  }

  /** node-independent model of one service, or null when this proxy does not serve it */
  entry(key: string): ServiceEntry | null {
    let e = this.entries.get(key);
    if (e !== undefined) return e;
    const svc = this.index.services.get(key);
    if (!svc) return null; // not cached: deleted services must not pile up here
    // the cluster IPs by family once: both ask for them, and reading them is work per service at start-up
    const clusterIPs = clusterIPsByFamily(svc.spec);
    e = isProxied(svc, this.serviceProxyName, clusterIPs) ? makeEntry(svc, clusterIPs) : null;
    this.entries.set(key, e);
    return e;
  }

  nodeInfo(nodeName: string): NodeInfo {
    return { name: nodeName, zone: this.index.nodes.get(nodeName)?.metadata.labels?.[ZONE_LABEL] ?? "" };
  }

  /** the Node's spec.podCIDRs (detectLocalMode NodeCIDR); none while the Node is absent or being deleted, as kube-proxy's waitForPodCIDR */
  nodePodCIDRs(nodeName: string): string[] {
    const node = this.index.nodes.get(nodeName);
    return node && !node.metadata.deletionTimestamp ? [...(node.spec?.podCIDRs ?? [])] : [];
  }

  /** the node's IPs (node-ips.ts); the override applies to the operator's own node only (other views are served to other nodes) */
  nodeIPs(nodeName: string): string[] {
    const override = this.nodeIPOverride?.node === nodeName ? this.nodeIPOverride.ips : [];
    return nodeIPs(this.index.nodes.get(nodeName), override);
  }
}

// One shared Set per combination of families (a Set per service would be memory per service for a few values).
const FAMILIES: ReadonlyArray<ReadonlySet<Family>> = [new Set(), new Set(["v4"]), new Set(["v6"]), new Set(["v4", "v6"])];

const KNOWN_TYPES = new Set(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]);
const externalIPs = (m: Service) => m.IPs!.ExternalIPs!.V4.length + m.IPs!.ExternalIPs!.V6.length;
/** A type kube-proxy does not know: upstream ServicePort.ExternallyAccessible (a node port, an external or a load-balancer IP). */
const reachableFromOutside = (m: Service) =>
  m.Ports.some((p) => p.NodePort !== 0) || externalIPs(m) + m.IPs!.LoadBalancerIPs!.V4.length + m.IPs!.LoadBalancerIPs!.V6.length > 0;

function makeEntry(svc: K8sService, clusterIPs: readonly string[]): ServiceEntry {
  const model = serviceModel(svc, clusterIPs);
  const ips = model.IPs!.ClusterIPs!;
  return {
    model,
    families: FAMILIES[(ips.V4.length ? 1 : 0) + (ips.V6.length ? 2 : 0)],
    internalLocal: internalPolicyLocal(svc),
    externalLocal: externalPolicyLocal(svc),
    external: KNOWN_TYPES.has(model.Type) ? model.Type !== "ClusterIP" || externalIPs(model) > 0 : reachableFromOutside(model),
  };
}

/** The brain's states carry a ShardedMap, so the next revision can share it. */
interface BrainState {
  readonly nodeName: string;
  readonly rev: number;
  readonly services: ShardedMap<ServiceEndpoints>;
  readonly nodeIPs: readonly string[];
}

export class NodeView {
  state: BrainState | null = null;
  /** the zone the state was computed for: a change recomputes every service */
  zone = "";
  private readonly listeners = new Set<Listener>();
  private waiters: Array<() => void> = [];

  constructor(
    private readonly brain: Brain,
    readonly nodeName: string,
  ) {}

  /** the node's IPs as the brain holds its Node now, before any state is computed (node-ips.ts) */
  currentNodeIPs(): readonly string[] {
    return this.brain.nodeIPs(this.nodeName);
  }

  /** Called with every new revision; if one exists already, at once with it (change null). */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    if (this.state) fn({ state: this.state, change: null });
    return () => this.listeners.delete(fn);
  }

  /** Resolves with the first state whose revision is greater than `rev`. */
  async next(rev: number, signal?: AbortSignal): Promise<BrainState> {
    while (!this.state || this.state.rev <= rev) {
      if (signal?.aborted) throw signal.reason;
      await new Promise<void>((resolve) => {
        const done = () => {
          signal?.removeEventListener("abort", done);
          resolve();
        };
        this.waiters.push(done);
        signal?.addEventListener("abort", done, { once: true });
      });
    }
    return this.state;
  }

  /** keys null = every service (first state, or this node's zone changed) */
  recompute(keys: StateChange): void {
    const prev = this.state;
    const known = this.brain.cluster.services;
    const todo = keys ?? (prev ? new Set([...known.keys(), ...prev.services.keys()]) : known.keys());
    const node = this.brain.nodeInfo(this.nodeName);
    this.zone = node.zone;
    const ips = this.brain.nodeIPs(this.nodeName);
    const ipsChanged = !!prev && !sameIPs(prev.nodeIPs, ips);
    const updates = new Map<string, ServiceEndpoints | null>();
    for (const key of todo) {
      const old = prev?.services.get(key);
      const next = this.compute(key, node);
      if (!next) {
        if (old) updates.set(key, null);
        continue;
      }
      const merged = old ? shareUnchanged(old, next) : next;
      if (merged !== old) updates.set(key, merged);
    }
    if (prev && updates.size === 0 && !ipsChanged) return;
    // A published state is never mutated (backends may hold it): copy what changed.
    const services = (prev?.services ?? ShardedMap.empty<ServiceEndpoints>()).with(updates);
    this.state = { nodeName: this.nodeName, rev: (prev?.rev ?? 0) + 1, services, nodeIPs: prev && !ipsChanged ? prev.nodeIPs : ips };
    this.brain.stats.revisions++;
    // New node IPs move node ports and health checks: every backend re-renders everything.
    const rev: Revision = { state: this.state, change: prev && !ipsChanged ? new Set(updates.keys()) : null };
    for (const fn of this.listeners) fn(rev);
    const w = this.waiters;
    this.waiters = [];
    for (const done of w) done();
  }

  private compute(key: string, node: NodeInfo): ServiceEndpoints | null {
    this.brain.stats.computed++;
    const e = this.brain.entry(key);
    if (!e) return null;
    const cands = candidates(this.brain.cluster.slices.get(key) ?? [], e.families, this.nodeName);
    // the last result's endpoints are reused where they come out the same
    // the options as a literal: a spread of the entry per service costs more than the fields it copies
    const opts = { internalLocal: e.internalLocal, externalLocal: e.externalLocal, external: e.external, node };
    return { service: e.model, endpoints: endpointsModel(e.model, cands, opts, this.state?.services.get(key)?.endpoints) };
  }
}

/**
 * `next` with every part equal to `old` replaced by old's object, so that
 * identity means equality downstream (diff streams and backends compare by
 * reference). Returns `old` itself when nothing changed.
 */
function shareUnchanged(old: ServiceEndpoints, next: ServiceEndpoints): ServiceEndpoints {
  const sameSvc = sameService(old.service, next.service);
  let changed = !sameSvc || old.endpoints.size !== next.endpoints.size;
  const keys: string[] = [];
  const eps: Endpoint[] = [];
  for (const [k, ep] of next.endpoints) {
    const prev = old.endpoints.get(k);
    keys.push(k);
    if (prev && sameEndpoint(prev, ep)) eps.push(prev);
    else {
      eps.push(ep);
      changed = true;
    }
  }
  if (!changed) return old;
  return { service: sameSvc ? old.service : next.service, endpoints: new EndpointMap(keys, eps) };
}
