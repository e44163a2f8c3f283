// The Windows kernel backend (incremental model). set*/delete* calls only
// record what changed; sync() re-renders those services and sends HNS only
// the difference against the policies it already programmed, so a one
// endpoint change is one HcnModifyLoadBalancer per affected policy (plus the
// remote endpoint's create or delete), and a brain restart that re-sends
// every object costs no call at all.
//
// After a start (or a failed sync) the backend knows nothing it can trust:
// it lists HNS once and *adopts* load balancers and remote endpoints that
// already match, updates the ones listening on a wanted frontend, and deletes
// what is left on its network once every service has been synced.

import {
  type BackendContext,
  type Config,
  type Endpoint,
  errorMessage,
  type IncrementalBackend,
  type Logger,
  type Service,
  serviceKey,
} from "../../src/host/toolkit/index.ts";
import type { HnsClient } from "./hns.ts";
import { type PolicySpec, type RenderContext, renderPolicies, samePolicy } from "./render-service.ts";
import { frontendOf, identityOf, loadBalancerSettings, remoteEndpointSettings, specOf } from "./settings.ts";

export interface WinkernelOptions {
  hns: HnsClient;
}

interface Programmed {
  id: string;
  spec: PolicySpec;
}

/** What HNS held when the backend (re)started, waiting to be adopted or removed. */
interface Inherited {
  byIdentity: Map<string, string[]>;
  byFrontend: Map<string, string[]>;
  /** every inherited load balancer of ours, and those adopted so far */
  all: string[];
  taken: Set<string>;
  remote: Map<string, string>;
}

/** Takes an inherited load balancer by identity or by frontend; each can be adopted once. */
function take(inh: Inherited | undefined, by: "byIdentity" | "byFrontend", key: string): string | undefined {
  const ids = inh?.[by].get(key);
  while (ids?.length) {
    const id = ids.shift()!;
    if (!inh!.taken.has(id)) {
      inh!.taken.add(id);
      return id;
    }
  }
  return undefined;
}

export function sourceVips(config: BackendContext["config"]): RenderContext["sourceVip"] {
  const src = config.winkernel.sourceVip;
  const pick = (v6: boolean) => (src && src.includes(":") === v6 ? src : config.nodeIPs.find((ip) => ip.includes(":") === v6)) ?? "";
  return { v4: pick(false), v6: pick(true) };
}

export class WinkernelBackend implements IncrementalBackend {
  readonly name = "winkernel";
  readonly kind = "incremental";
  /** HNS calls made by the last sync (lists included) */
  readonly last = { calls: 0 };

  private readonly config: Config;
  private readonly log: Logger;
  private readonly renderCtx: RenderContext;
  private readonly counted: ReturnType<typeof countCalls>;
  private readonly hns: HnsClient;
  private readonly services = new Map<string, Service>();
  private readonly endpoints = new Map<string, Map<string, Endpoint>>();
  private readonly dirty = new Set<string>();
  private readonly programmed = new Map<string, Map<string, Programmed>>();
  /** remote endpoint IP -> its HNS id and the services using it */
  private readonly remote = new Map<string, { id: string; users: Set<string> }>();
  private readonly remoteOf = new Map<string, Set<string>>();
  private localIds = new Map<string, string>();
  private inherited: Inherited | undefined;
  private trusted = false;

  constructor(ctx: BackendContext, opts: WinkernelOptions) {
    this.config = ctx.config;
    this.log = ctx.log;
    this.renderCtx = { enableDSR: this.config.winkernel.enableDSR, sourceVip: sourceVips(this.config) };
    this.counted = countCalls(opts.hns);
    this.hns = this.counted.client;
  }

  setNodeIPs(ips: readonly string[]): void {
    // Without winkernel.sourceVip, the node's IP is the source VIP of every policy.
    const vips = sourceVips({ ...this.config, nodeIPs: [...ips] });
    if (vips.v4 === this.renderCtx.sourceVip.v4 && vips.v6 === this.renderCtx.sourceVip.v6) return;
    this.renderCtx.sourceVip = vips;
    for (const k of this.services.keys()) this.dirty.add(k);
  }

  setService(s: Service): void {
    const k = serviceKey(s.Namespace, s.Name);
    this.services.set(k, s);
    this.dirty.add(k);
  }

  deleteService(ns: string, name: string): void {
    const k = serviceKey(ns, name);
    this.services.delete(k);
    this.endpoints.delete(k);
    this.dirty.add(k);
  }

  setEndpoint(ns: string, name: string, key: string, ep: Endpoint): void {
    const k = serviceKey(ns, name);
    let m = this.endpoints.get(k);
    if (!m) this.endpoints.set(k, (m = new Map()));
    m.set(key, ep);
    this.dirty.add(k);
  }

  deleteEndpoint(ns: string, name: string, key: string): void {
    const k = serviceKey(ns, name);
    this.endpoints.get(k)?.delete(key);
    this.dirty.add(k);
  }

  async sync(): Promise<void> {
    this.counted.reset();
    try {
      if (!this.trusted) await this.relearn();
      const keys = [...this.dirty];
      this.dirty.clear();
      const released = new Set<string>();
      for (const key of keys) await this.syncService(key, released);
      // Remote endpoints go last: no load balancer may still reference them.
      for (const ip of released) {
        const r = this.remote.get(ip);
        if (r && !r.users.size) {
          this.remote.delete(ip);
          await this.hns.deleteEndpoint(r.id);
        }
      }
      if (this.inherited) await this.dropLeftovers(this.inherited);
      this.inherited = undefined;
      this.trusted = true;
    } catch (err) {
      // HNS state is unknown now: the next sync re-reads it and re-syncs every service.
      this.trusted = false;
      throw err;
    } finally {
      this.last.calls = this.counted.calls;
    }
  }

  async cleanup(): Promise<void> {
    const { hns, log } = this;
    // Everything kpng programs: every load balancer and remote endpoint on the network.
    for (const lb of await hns.listLoadBalancers()) {
      await hns
        .deleteLoadBalancer(lb.id)
        .catch((err: unknown) => log.warn("cleanup: load balancer", { id: lb.id, error: errorMessage(err) }));
    }
    for (const e of await hns.listEndpoints()) {
      if (e.remote)
        await hns.deleteEndpoint(e.id).catch((err: unknown) => log.warn("cleanup: endpoint", { id: e.id, error: errorMessage(err) }));
    }
    this.trusted = false;
  }

  /** Forget what we think HNS holds and read it back; everything becomes dirty. */
  private async relearn() {
    const eps = await this.hns.listEndpoints();
    const lbs = await this.hns.listLoadBalancers();
    const ipOfId = new Map(eps.map((e) => [e.id.toLowerCase(), e.ip]));
    this.localIds = new Map(eps.filter((e) => !e.remote).map((e) => [e.ip, e.id]));
    const inherited: Inherited = {
      byIdentity: new Map(),
      byFrontend: new Map(),
      all: [],
      taken: new Set(),
      remote: new Map(eps.filter((e) => e.remote).map((e) => [e.ip, e.id])),
    };
    this.inherited = inherited;
    for (const lb of lbs) {
      const spec = specOf(lb.settings, ipOfId);
      if (!spec) continue; // endpoints outside our network: not ours
      inherited.all.push(lb.id);
      for (const [m, k] of [
        [inherited.byIdentity, identityOf(spec)],
        [inherited.byFrontend, frontendOf(spec)],
      ] as const) {
        m.set(k, [...(m.get(k) ?? []), lb.id]);
      }
    }
    for (const k of this.programmed.keys()) this.dirty.add(k);
    for (const k of this.services.keys()) this.dirty.add(k);
    this.programmed.clear();
    this.remote.clear();
    this.remoteOf.clear();
  }

  private async resolveLocal(ips: Iterable<string>) {
    const missing = [...ips].filter((ip) => !this.localIds.has(ip));
    if (!missing.length) return;
    if (this.config.dryRun) {
      // No HNS to look pods up in: name them so the printed calls stay readable.
      for (const ip of missing) this.localIds.set(ip, `local-endpoint-${ip}`);
      return;
    }
    for (const e of await this.hns.listEndpoints()) if (!e.remote) this.localIds.set(e.ip, e.id);
    for (const ip of missing) if (!this.localIds.has(ip)) this.log.debug("local endpoint not in HNS yet; left out", { ip });
  }

  private async ensureRemote(ip: string, user: string): Promise<string> {
    let r = this.remote.get(ip);
    if (!r) {
      const adopted = this.inherited?.remote.get(ip);
      if (adopted) this.inherited!.remote.delete(ip);
      r = { id: adopted ?? (await this.hns.createEndpoint(remoteEndpointSettings(ip))), users: new Set() };
      this.remote.set(ip, r);
    }
    r.users.add(user);
    return r.id;
  }

  private async syncService(key: string, released: Set<string>) {
    const { hns } = this;
    const svc = this.services.get(key);
    const want = svc ? renderPolicies(svc, this.endpoints.get(key)?.values() ?? [], this.renderCtx) : undefined;
    if (want?.skipped.length)
      this.log.warn("endpoints with another target port left out (HNS balances to one port)", { service: key, endpoints: want.skipped });
    const localWanted = want ? [...want.locality].filter(([, l]) => l).map(([ip]) => ip) : [];
    await this.resolveLocal(localWanted);

    const usedRemote = new Set<string>();
    const next = new Map<string, Programmed>();
    const prev = this.programmed.get(key) ?? new Map<string, Programmed>();
    const resolved = new Map<string, { spec: PolicySpec; ids: string[] }>();
    for (const [k, spec] of want?.policies ?? []) {
      const ips = spec.endpoints.filter((ip) => !want!.locality.get(ip) || this.localIds.has(ip));
      if (!ips.length) continue;
      const ids: string[] = [];
      for (const ip of ips) {
        if (want!.locality.get(ip)) ids.push(this.localIds.get(ip)!);
        else ids.push(await this.ensureRemote(ip, key)), usedRemote.add(ip);
      }
      resolved.set(k, { spec: ips.length === spec.endpoints.length ? spec : { ...spec, endpoints: ips }, ids });
    }

    // Deletes first: a policy that changed kind may free a frontend another one needs.
    for (const [k, p] of prev) if (!resolved.has(k)) await hns.deleteLoadBalancer(p.id);
    for (const [k, { spec, ids }] of resolved) {
      const p = prev.get(k);
      if (p && samePolicy(p.spec, spec)) {
        next.set(k, p);
        continue;
      }
      const settings = loadBalancerSettings(spec, ids);
      let id = p?.id ?? take(this.inherited, "byIdentity", identityOf(spec));
      if (id && !p) {
        next.set(k, { id, spec }); // adopted as is
        continue;
      }
      id ??= take(this.inherited, "byFrontend", frontendOf(spec));
      if (id) await hns.updateLoadBalancer(id, settings);
      else id = await hns.createLoadBalancer(settings);
      next.set(k, { id, spec });
    }
    if (next.size) this.programmed.set(key, next);
    else this.programmed.delete(key);

    for (const ip of this.remoteOf.get(key) ?? []) {
      if (usedRemote.has(ip)) continue;
      this.remote.get(ip)?.users.delete(key);
      released.add(ip);
    }
    if (usedRemote.size) this.remoteOf.set(key, usedRemote);
    else this.remoteOf.delete(key);
  }

  private async dropLeftovers(inh: Inherited) {
    const ids = inh.all.filter((id) => !inh.taken.has(id));
    for (const id of ids) await this.hns.deleteLoadBalancer(id);
    for (const id of inh.remote.values()) await this.hns.deleteEndpoint(id);
    if (ids.length || inh.remote.size)
      this.log.info("removed HNS objects left by an earlier run", { loadBalancers: ids.length, endpoints: inh.remote.size });
  }
}

export const createWinkernelBackend = (ctx: BackendContext, opts: WinkernelOptions) => new WinkernelBackend(ctx, opts);

/** Wraps a client to count calls per sync (cheap figures for logs, tests and the benchmark). */
function countCalls(inner: HnsClient) {
  let calls = 0;
  const wrap =
    <K extends keyof HnsClient>(name: K) =>
    (...args: Parameters<HnsClient[K]>) => {
      calls++;
      return (inner[name] as (...a: unknown[]) => ReturnType<HnsClient[K]>).apply(inner, args);
    };
  const client: HnsClient = {
    listEndpoints: wrap("listEndpoints"),
    createEndpoint: wrap("createEndpoint"),
    deleteEndpoint: wrap("deleteEndpoint"),
    listLoadBalancers: wrap("listLoadBalancers"),
    createLoadBalancer: wrap("createLoadBalancer"),
    updateLoadBalancer: wrap("updateLoadBalancer"),
    deleteLoadBalancer: wrap("deleteLoadBalancer"),
  };
  return {
    client,
    get calls() {
      return calls;
    },
    reset: () => void (calls = 0),
  };
}
