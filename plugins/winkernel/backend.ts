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

import { type BackendContext, type Endpoint, errorMessage, type IncrementalBackend, type Service } from "../../src/plugins/toolkit/index.ts";
import type { HnsClient } from "./hns.ts";
import { type PolicySpec, type RenderContext, renderPolicies, samePolicy } from "./render-service.ts";
import { frontendOf, identityOf, loadBalancerSettings, remoteEndpointSettings, specOf } from "./settings.ts";

export interface WinkernelBackendOptions {
  hns: HnsClient;
}

export interface WinkernelBackend extends IncrementalBackend {
  /** HNS calls made by the last sync (lists included) */
  readonly last: { calls: number };
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
  const pick = (v6: boolean) =>
    (src && src.includes(":") === v6 ? src : config.nodeIPs.find((ip) => ip.includes(":") === v6)) ?? "";
  return { v4: pick(false), v6: pick(true) };
}

export function createWinkernelBackend(ctx: BackendContext, opts: WinkernelBackendOptions): WinkernelBackend {
  const { config, log } = ctx;
  const renderCtx: RenderContext = { enableDSR: config.winkernel.enableDSR, sourceVip: sourceVips(config) };
  const counted = countCalls(opts.hns);
  const hns = counted.client;

  const services = new Map<string, Service>();
  const endpoints = new Map<string, Map<string, Endpoint>>();
  const dirty = new Set<string>();
  const programmed = new Map<string, Map<string, Programmed>>();
  /** remote endpoint IP -> its HNS id and the services using it */
  const remote = new Map<string, { id: string; users: Set<string> }>();
  const remoteOf = new Map<string, Set<string>>();
  let localIds = new Map<string, string>();
  let inherited: Inherited | undefined;
  let trusted = false;
  const last = { calls: 0 };

  /** Forget what we think HNS holds and read it back; everything becomes dirty. */
  async function relearn() {
    const eps = await hns.listEndpoints();
    const lbs = await hns.listLoadBalancers();
    const ipOfId = new Map(eps.map((e) => [e.id.toLowerCase(), e.ip]));
    localIds = new Map(eps.filter((e) => !e.remote).map((e) => [e.ip, e.id]));
    inherited = { byIdentity: new Map(), byFrontend: new Map(), all: [], taken: new Set(), remote: new Map(eps.filter((e) => e.remote).map((e) => [e.ip, e.id])) };
    for (const lb of lbs) {
      const spec = specOf(lb.settings, ipOfId);
      if (!spec) continue; // endpoints outside our network: not ours
      inherited.all.push(lb.id);
      for (const [m, k] of [[inherited.byIdentity, identityOf(spec)], [inherited.byFrontend, frontendOf(spec)]] as const) {
        m.set(k, [...(m.get(k) ?? []), lb.id]);
      }
    }
    for (const k of programmed.keys()) dirty.add(k);
    for (const k of services.keys()) dirty.add(k);
    programmed.clear();
    remote.clear();
    remoteOf.clear();
  }

  async function resolveLocal(ips: Iterable<string>) {
    const missing = [...ips].filter((ip) => !localIds.has(ip));
    if (!missing.length) return;
    if (config.dryRun) {
      // No HNS to look pods up in: name them so the printed calls stay readable.
      for (const ip of missing) localIds.set(ip, `local-endpoint-${ip}`);
      return;
    }
    for (const e of await hns.listEndpoints()) if (!e.remote) localIds.set(e.ip, e.id);
    for (const ip of missing) if (!localIds.has(ip)) log.debug("local endpoint not in HNS yet; left out", { ip });
  }

  async function ensureRemote(ip: string, user: string): Promise<string> {
    let r = remote.get(ip);
    if (!r) {
      const adopted = inherited?.remote.get(ip);
      if (adopted) inherited!.remote.delete(ip);
      r = { id: adopted ?? (await hns.createEndpoint(remoteEndpointSettings(ip))), users: new Set() };
      remote.set(ip, r);
    }
    r.users.add(user);
    return r.id;
  }

  async function syncService(key: string, released: Set<string>) {
    const svc = services.get(key);
    const want = svc ? renderPolicies(svc, endpoints.get(key)?.values() ?? [], renderCtx) : undefined;
    if (want?.skipped.length) log.warn("endpoints with another target port left out (HNS balances to one port)", { service: key, endpoints: want.skipped });
    const localWanted = want ? [...want.locality].filter(([, l]) => l).map(([ip]) => ip) : [];
    await resolveLocal(localWanted);

    const usedRemote = new Set<string>();
    const next = new Map<string, Programmed>();
    const prev = programmed.get(key) ?? new Map<string, Programmed>();
    const resolved = new Map<string, { spec: PolicySpec; ids: string[] }>();
    for (const [k, spec] of want?.policies ?? []) {
      const ips = spec.endpoints.filter((ip) => !want!.locality.get(ip) || localIds.has(ip));
      if (!ips.length) continue;
      const ids: string[] = [];
      for (const ip of ips) {
        if (want!.locality.get(ip)) ids.push(localIds.get(ip)!);
        else ids.push(await ensureRemote(ip, key)), usedRemote.add(ip);
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
      let id = p?.id ?? take(inherited, "byIdentity", identityOf(spec));
      if (id && !p) {
        next.set(k, { id, spec }); // adopted as is
        continue;
      }
      id ??= take(inherited, "byFrontend", frontendOf(spec));
      if (id) await hns.updateLoadBalancer(id, settings);
      else id = await hns.createLoadBalancer(settings);
      next.set(k, { id, spec });
    }
    if (next.size) programmed.set(key, next);
    else programmed.delete(key);

    for (const ip of remoteOf.get(key) ?? []) {
      if (usedRemote.has(ip)) continue;
      remote.get(ip)?.users.delete(key);
      released.add(ip);
    }
    if (usedRemote.size) remoteOf.set(key, usedRemote);
    else remoteOf.delete(key);
  }

  async function sync() {
    counted.reset();
    try {
      if (!trusted) await relearn();
      const keys = [...dirty];
      dirty.clear();
      const released = new Set<string>();
      for (const key of keys) await syncService(key, released);
      // Remote endpoints go last: no load balancer may still reference them.
      for (const ip of released) {
        const r = remote.get(ip);
        if (r && !r.users.size) {
          remote.delete(ip);
          await hns.deleteEndpoint(r.id);
        }
      }
      if (inherited) await dropLeftovers(inherited);
      inherited = undefined;
      trusted = true;
    } catch (err) {
      // HNS state is unknown now: the next sync re-reads it and re-syncs every service.
      trusted = false;
      throw err;
    } finally {
      last.calls = counted.calls;
    }
  }

  async function dropLeftovers(inh: Inherited) {
    const ids = inh.all.filter((id) => !inh.taken.has(id));
    for (const id of ids) await hns.deleteLoadBalancer(id);
    for (const id of inh.remote.values()) await hns.deleteEndpoint(id);
    if (ids.length || inh.remote.size) log.info("removed HNS objects left by an earlier run", { loadBalancers: ids.length, endpoints: inh.remote.size });
  }

  const svcKey = (ns: string, name: string) => `${ns}/${name}`;
  return {
    name: "winkernel",
    kind: "incremental",
    last,
    setNodeIPs(ips) {
      // Without winkernel.sourceVip, the node's IP is the source VIP of every policy.
      const vips = sourceVips({ ...config, nodeIPs: [...ips] });
      if (vips.v4 === renderCtx.sourceVip.v4 && vips.v6 === renderCtx.sourceVip.v6) return;
      renderCtx.sourceVip = vips;
      for (const k of services.keys()) dirty.add(k);
    },
    setService(s) {
      const k = svcKey(s.Namespace, s.Name);
      services.set(k, s);
      dirty.add(k);
    },
    deleteService(ns, name) {
      const k = svcKey(ns, name);
      services.delete(k);
      endpoints.delete(k);
      dirty.add(k);
    },
    setEndpoint(ns, name, key, ep) {
      const k = svcKey(ns, name);
      let m = endpoints.get(k);
      if (!m) endpoints.set(k, (m = new Map()));
      m.set(key, ep);
      dirty.add(k);
    },
    deleteEndpoint(ns, name, key) {
      const k = svcKey(ns, name);
      endpoints.get(k)?.delete(key);
      dirty.add(k);
    },
    sync,
    async cleanup() {
      // Everything kpng programs: every load balancer and remote endpoint on the network.
      for (const lb of await hns.listLoadBalancers()) {
        await hns.deleteLoadBalancer(lb.id).catch((err: unknown) => log.warn("cleanup: load balancer", { id: lb.id, error: errorMessage(err) }));
      }
      for (const e of await hns.listEndpoints()) {
        if (e.remote) await hns.deleteEndpoint(e.id).catch((err: unknown) => log.warn("cleanup: endpoint", { id: e.id, error: errorMessage(err) }));
      }
      trusted = false;
    },
  };
}

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
