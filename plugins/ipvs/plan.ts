// Pure planning: the desired picture (sum of every service's model, with
// reference counts so two services may share an address or an ipset entry)
// against the kernel picture, restricted to the keys a sync touched. A
// one-endpoint change touches one virtual server, so it plans O(1) operations
// whatever the cluster size.
//
// Graceful removal (upstream pkg/proxy/ipvs/graceful_termination.go): a TCP
// real server that leaves a virtual server that stays is first set to weight
// 0, so IPVS sends it no new connection while existing ones finish; planDrain
// deletes it once its connection counters read zero. UDP and SCTP reals are
// deleted at once (expire_nodest_conn ends their flows).

import {
  type IpvsOp,
  type KernelModel,
  type ServiceModel,
  type Transaction,
  type VirtualServer,
  type VirtualService,
  drainsGracefully,
  emptyTransaction,
  rsKey,
  vsKey,
} from "./model.ts";

export interface Touched {
  vs: Set<string>;
  addresses: Set<string>;
  entries: Set<string>;
}

export const noneTouched = (): Touched => ({ vs: new Set(), addresses: new Set(), entries: new Set() });

const bump = (refs: Map<string, number>, key: string, by: number) => {
  const n = (refs.get(key) ?? 0) + by;
  if (n > 0) refs.set(key, n);
  else refs.delete(key);
};

/** The desired kernel picture, kept up to date one service at a time. */
export class DesiredState {
  readonly services = new Map<string, ServiceModel>();
  /** vsKey -> the services claiming it (normally one) */
  private readonly claims = new Map<string, Map<string, VirtualService>>();
  private readonly addressRefs = new Map<string, number>();
  private readonly entryRefs = new Map<string, number>();

  /** Replaces one service's contribution (undefined = gone), recording what it touched. */
  set(key: string, next: ServiceModel | undefined, touched: Touched): void {
    const prev = this.services.get(key);
    if (prev) {
      for (const k of prev.virtualServices.keys()) {
        const c = this.claims.get(k);
        c?.delete(key);
        if (c && c.size === 0) this.claims.delete(k);
        touched.vs.add(k);
      }
      for (const a of prev.addresses) bump(this.addressRefs, a, -1), touched.addresses.add(a);
      for (const e of prev.entries) bump(this.entryRefs, e, -1), touched.entries.add(e);
    }
    if (next) {
      for (const [k, v] of next.virtualServices) {
        let c = this.claims.get(k);
        if (!c) this.claims.set(k, (c = new Map()));
        c.set(key, v);
        touched.vs.add(k);
      }
      for (const a of next.addresses) bump(this.addressRefs, a, 1), touched.addresses.add(a);
      for (const e of next.entries) bump(this.entryRefs, e, 1), touched.entries.add(e);
      this.services.set(key, next);
    } else {
      this.services.delete(key);
    }
  }

  /** The virtual service wanted under `key`; two services claiming one address:port resolve to the first by name. */
  virtualService(key: string): VirtualService | undefined {
    const c = this.claims.get(key);
    if (!c) return undefined;
    if (c.size === 1) return c.values().next().value;
    return c.get([...c.keys()].sort()[0]!);
  }

  /** Virtual server keys claimed by more than one service (for a warning). */
  conflicts(keys: Iterable<string>): string[] {
    const out: string[] = [];
    for (const k of keys) if ((this.claims.get(k)?.size ?? 0) > 1) out.push(k);
    return out;
  }

  wantsAddress = (ip: string) => this.addressRefs.has(ip);
  wantsEntry = (e: string) => this.entryRefs.has(e);

  allKeys(): Touched {
    return { vs: new Set(this.claims.keys()), addresses: new Set(this.addressRefs.keys()), entries: new Set(this.entryRefs.keys()) };
  }
}

const sameServer = (a: VirtualServer, b: VirtualServer) => a.scheduler === b.scheduler && a.persistence === b.persistence;

function planVirtualService(want: VirtualService | undefined, have: VirtualService | undefined, ops: IpvsOp[], keep: KeepVirtualServer) {
  if (!want) {
    if (have && !keep(have.vs)) ops.push({ op: "delete-service", vs: have.vs });
    return;
  }
  if (!have) {
    ops.push({ op: "add-service", vs: want.vs });
    for (const rs of want.reals.values()) ops.push({ op: "add-real", vs: want.vs, rs });
    return;
  }
  if (!sameServer(want.vs, have.vs)) ops.push({ op: "edit-service", vs: want.vs });
  for (const [k, rs] of want.reals) {
    const h = have.reals.get(k);
    if (!h) ops.push({ op: "add-real", vs: want.vs, rs });
    else if (h.weight !== rs.weight) ops.push({ op: "edit-real", vs: want.vs, rs }); // e.g. back from draining
  }
  for (const [k, h] of have.reals) {
    if (want.reals.has(k)) continue;
    if (!drainsGracefully(want.vs.proto)) ops.push({ op: "delete-real", vs: want.vs, rs: h });
    else if (h.weight !== 0) ops.push({ op: "edit-real", vs: want.vs, rs: { ...h, weight: 0 } });
    // weight 0 already: draining, planDrain deletes it
  }
}

/**
 * The virtual servers a full sync may change or delete: kpng's, which are
 * those on an address of kube-ipvs0 (cluster, external and load-balancer
 * IPs) and those whose ip,proto:port one of kpng's sets holds (its node
 * ports). IPVS keeps no mark of who made a virtual server, so one kpng
 * cannot prove its own (keepalived's, an operator's) is left alone, as the
 * --cleanup sweep leaves it (src/host/leftovers/plan.ts).
 */
export function ownedVirtualServers(kernel: KernelModel): string[] {
  const inSets = new Set<string>();
  for (const e of kernel.entries) inSets.add(e.slice(e.indexOf(" ") + 1));
  const out: string[] = [];
  for (const [k, { vs }] of kernel.virtualServices)
    if (kernel.addresses.has(vs.ip) || inSets.has(`${vs.ip},${vs.proto}:${vs.port}`)) out.push(k);
  return out;
}

/** A virtual server no service wants that must stay all the same (ipvs.excludeCIDRs, settings.ts). */
export type KeepVirtualServer = (vs: VirtualServer) => boolean;

/** What to run so the kernel matches the desired state on the touched keys. */
export function planChanges(
  desired: DesiredState,
  kernel: KernelModel,
  touched: Touched,
  keep: KeepVirtualServer = () => false,
): Transaction {
  const tx = emptyTransaction();
  for (const k of touched.vs) planVirtualService(desired.virtualService(k), kernel.virtualServices.get(k), tx.ipvs, keep);
  for (const ip of touched.addresses) {
    const want = desired.wantsAddress(ip);
    if (want !== kernel.addresses.has(ip)) tx.addresses.push({ op: want ? "add" : "del", ip });
  }
  for (const e of touched.entries) {
    const want = desired.wantsEntry(e);
    if (want === kernel.entries.has(e)) continue;
    const sp = e.indexOf(" ");
    tx.sets.push({ op: want ? "add" : "del", set: e.slice(0, sp), entry: e.slice(sp + 1) });
  }
  return tx;
}

/** Records a successfully applied transaction in the kernel picture. */
export function commit(kernel: KernelModel, tx: Transaction): void {
  for (const o of tx.ipvs) {
    const k = vsKey(o.vs);
    switch (o.op) {
      case "add-service":
        kernel.virtualServices.set(k, { vs: o.vs, reals: new Map() });
        break;
      case "edit-service": {
        const v = kernel.virtualServices.get(k);
        if (v) v.vs = o.vs;
        break;
      }
      case "delete-service":
        kernel.virtualServices.delete(k);
        break;
      case "add-real":
      case "edit-real":
        kernel.virtualServices.get(k)?.reals.set(rsKey(o.rs), o.rs);
        break;
      case "delete-real":
        kernel.virtualServices.get(k)?.reals.delete(rsKey(o.rs));
        break;
    }
  }
  for (const a of tx.addresses) a.op === "add" ? kernel.addresses.add(a.ip) : kernel.addresses.delete(a.ip);
  for (const s of tx.sets) {
    const e = `${s.set} ${s.entry}`;
    s.op === "add" ? kernel.entries.add(e) : kernel.entries.delete(e);
  }
}

/** Virtual services that have draining (weight 0) real servers. */
export function drainingServices(kernel: KernelModel): VirtualService[] {
  const out: VirtualService[] = [];
  for (const v of kernel.virtualServices.values()) {
    for (const rs of v.reals.values()) {
      if (rs.weight === 0) {
        out.push(v);
        break;
      }
    }
  }
  return out;
}

/**
 * Deletes for draining reals whose connections are over. `connections` maps a
 * virtual server key to the active+inactive count of each of its reals, as
 * the kernel reports it; a real the kernel no longer lists counts as done.
 */
export function planDrain(draining: readonly VirtualService[], connections: ReadonlyMap<string, ReadonlyMap<string, number>>): Transaction {
  const tx = emptyTransaction();
  for (const v of draining) {
    const counts = connections.get(vsKey(v.vs));
    if (!counts) continue; // not queried: try again next round
    for (const [k, rs] of v.reals) if (rs.weight === 0 && !counts.get(k)) tx.ipvs.push({ op: "delete-real", vs: v.vs, rs });
  }
  return tx;
}
