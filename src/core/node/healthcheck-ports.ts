// Health-check node ports: for each LoadBalancer service with
// externalTrafficPolicy=Local, an HTTP server on its healthCheckNodePort that
// tells the cloud load balancer whether this node has a usable endpoint
// (200) or not (503), with kube-proxy's JSON body and
// X-Load-Balancing-Endpoint-Weight (pkg/proxy/healthcheck/service_health.go).
// Driven by the node-local state: servers open and close as services come
// and go; endpoint counts change in place.

import { networkInterfaces } from "node:os";
import type { Endpoint } from "../../gen/localv1/services_pb.ts";
import { errorMessage } from "../errors.ts";
import { serveHttp, type HttpServer } from "./http-serve.ts";
import type { Logger } from "../log.ts";
import type { NodeState, ServiceEndpoints, StateChange } from "../brain/state.ts";

/**
 * Endpoints the load balancer may count on: on this node, used for external
 * traffic, and not terminating. A node left with only terminating endpoints
 * answers 503 so the load balancer drains it, as upstream's
 * LocalReadyEndpoints does (traffic still reaches them meanwhile).
 */
export const countsForHealthCheck = (e: Endpoint) => e.Local && e.Scopes?.External === true && !e.Terminating;

interface Instance {
  namespace: string;
  name: string;
  port: number;
  endpoints: number;
  servers: HttpServer[];
}

export interface HealthCheckPortsOptions {
  /** addresses to listen on (one server per address and port); `retarget` changes them */
  addresses: readonly string[];
  /** kube-proxy's own health: an unhealthy proxy answers 503 everywhere */
  proxyHealthy: () => boolean;
  log: Logger;
}

export class HealthCheckPorts {
  private readonly open = new Map<string, Instance>();
  private addresses: readonly string[];
  /** the next update looks at every service (a port failed to open, or every server closed) */
  private stale = false;

  constructor(private readonly opts: HealthCheckPortsOptions) {
    this.addresses = opts.addresses;
  }

  /** where the servers listen now */
  get listening(): readonly string[] {
    return this.addresses;
  }

  /** New addresses (the node's IPs changed): every server closes, and the next `update` reopens it there. */
  retarget(addresses: readonly string[]): void {
    if (addresses.length === this.addresses.length && addresses.every((a, i) => a === this.addresses[i])) return;
    this.opts.log.info("health check ports move", { from: this.addresses.join(","), to: addresses.join(",") });
    this.addresses = addresses;
    this.close();
    this.stale = true;
  }

  /** port per service key, for what is currently open */
  get ports(): Map<string, number> {
    return new Map([...this.open].map(([k, i]) => [k, i.port]));
  }

  /**
   * Opens, closes and recounts to match `state`; `change` names the services
   * that changed (null = any may have: after start-up or a retarget), so a
   * change costs what it touches, not the cluster. Ports that fail to open are
   * retried at the next full update.
   */
  update(state: NodeState, change: StateChange = null): void {
    const keys = change === null || this.stale ? new Set([...this.open.keys(), ...state.services.keys()]) : change;
    this.stale = false;
    for (const key of keys) this.reconcile(key, state.services.get(key));
  }

  /** one service's server: opened, moved, closed or recounted */
  private reconcile(key: string, se: ServiceEndpoints | undefined): void {
    const s = se?.service;
    const want = s && s.Type === "LoadBalancer" && s.ExternalTrafficToLocal && s.HealthCheckNodePort ? s : undefined;
    const inst = this.open.get(key);
    if (inst && inst.port !== want?.HealthCheckNodePort) {
      this.opts.log.info("closing health check port", { service: key, port: inst.port });
      for (const srv of inst.servers) srv.close();
      this.open.delete(key);
    }
    if (!want) return;
    let endpoints = 0;
    for (const e of se!.endpoints.values()) if (countsForHealthCheck(e)) endpoints++;
    const open = this.open.get(key);
    if (open) {
      open.endpoints = endpoints;
      return;
    }
    const opened = this.listen(key, { namespace: want.Namespace, name: want.Name, port: want.HealthCheckNodePort, endpoints, servers: [] });
    if (opened) this.open.set(key, opened);
    else this.stale = true; // retried at the next update
  }

  close(): void {
    for (const inst of this.open.values()) for (const s of inst.servers) s.close();
    this.open.clear();
  }

  private listen(key: string, inst: Instance): Instance | null {
    try {
      for (const host of this.addresses) {
        inst.servers.push(
          serveHttp({ host, port: inst.port, what: `health check for ${key}`, log: this.opts.log, handle: () => this.answer(inst) }),
        );
      }
      return inst;
    } catch (err) {
      // Someone else holds the port: close what did open so a later retry starts clean.
      for (const s of inst.servers) s.close();
      this.opts.log.error("failed to start health check", { service: key, port: inst.port, error: errorMessage(err) });
      return null;
    }
  }

  private answer(inst: Instance) {
    const healthy = this.opts.proxyHealthy();
    const ok = inst.endpoints !== 0 && healthy;
    return {
      status: ok ? 200 : 503,
      type: "application/json",
      headers: { "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": String(inst.endpoints) },
      body: `{\n\t"service": {\n\t\t"namespace": ${JSON.stringify(inst.namespace)},\n\t\t"name": ${JSON.stringify(inst.name)}\n\t},\n\t"localEndpoints": ${inst.endpoints},\n\t"serviceProxyHealthy": ${healthy}\n}`,
    };
  }
}

/**
 * Where health-check ports listen: the node-port addresses (CIDRs select this
 * host's addresses in them, "primary" the node IPs), else the node IPs, else
 * every address.
 */
export function healthCheckAddresses(opts: {
  nodePortAddresses: readonly string[];
  nodeIPs: readonly string[];
  hostAddresses: readonly string[];
}): string[] {
  const out = new Set<string>();
  for (const entry of opts.nodePortAddresses) {
    if (entry === "primary") for (const ip of opts.nodeIPs) out.add(ip);
    else for (const ip of opts.hostAddresses) if (cidrContains(entry, ip)) out.add(ip);
  }
  if (opts.nodePortAddresses.length === 0) for (const ip of opts.nodeIPs) out.add(ip);
  return out.size ? [...out] : ["::"];
}

/** this host's addresses, every interface's (what --nodeport-addresses CIDRs select from) */
export const hostAddresses = (): string[] =>
  Object.values(networkInterfaces())
    .flat()
    .map((a) => a?.address)
    .filter((a): a is string => !!a);

export function cidrContains(cidr: string, ip: string): boolean {
  const [net, bitsText] = cidr.split("/");
  const bits = Number(bitsText);
  const a = toBytes(net);
  const b = toBytes(ip);
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length && bits > i * 8; i++) {
    const n = Math.min(8, bits - i * 8);
    const mask = (0xff << (8 - n)) & 0xff;
    if ((a[i] & mask) !== (b[i] & mask)) return false;
  }
  return true;
}

function toBytes(ip: string): number[] | null {
  if (ip.includes(".") && !ip.includes(":")) {
    const p = ip.split(".").map(Number);
    return p.length === 4 && p.every((x) => x >= 0 && x <= 255) ? p : null;
  }
  if (!ip.includes(":")) return null;
  const [head, tail] = ip.split("::");
  const parse = (s: string) => (s ? s.split(":").flatMap((h) => [parseInt(h, 16) >> 8, parseInt(h, 16) & 0xff]) : []);
  const h = parse(head);
  const t = tail === undefined ? [] : parse(tail);
  const fill = 16 - h.length - t.length;
  if (fill < 0 || (tail === undefined && fill !== 0)) return null;
  return [...h, ...Array(fill).fill(0), ...t];
}
