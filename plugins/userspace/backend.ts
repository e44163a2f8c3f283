// The userspace backend: a service proxy in this process, for nodes where
// kpng cannot program the kernel's NAT (the KEP's kube-proxy-userspace-linux).
// Per frontend (service IP or node IP, protocol, port) with endpoints, a
// relay listens and copies bytes between each client and an endpoint
// (tcp-relay.ts, udp-relay.ts). A frontend without endpoints has no relay:
// the node itself refuses (TCP reset, ICMP port unreachable).
//
// How clients reach the relays (Config.userspaceMode):
//   bind      the service IPs are made local by routes (local-routes.ts)
//             and each relay listens on its own address and port; needs
//             `ip`, `sysctl` and CAP_NET_ADMIN, no nftables;
//   redirect  each relay listens on an ephemeral port on every address and
//             an nftables table per family redirects the frontend to it
//             (render-redirect.ts); needs nft.
// Node ports listen on the node IPs (or every node address inside the
// --nodeport-addresses CIDRs) in both modes.
//
// Full state: each apply re-plans the frontends (a few per service) of the
// services that changed (all of them on a full sync) and acts on the
// difference; relays that stay keep their connections, and a changed
// endpoint set closes only the connections of endpoints that left.

import {
  type BackendContext,
  errorMessage,
  type Executor,
  type FullStateBackend,
  type Logger,
  needsInterfaceAddresses,
  nodeIPsOf,
  nodePortIPs,
  parseIpAddrJson,
  type NodeState,
  sameIPs,
  type StateChange,
} from "../../src/host/toolkit/index.ts";
import { LocalRoutes } from "./local-routes.ts";
import { processExecutor } from "./executor.ts";
import { hasEndpoints, sameFrontend, type Frontend } from "./frontends.ts";
import { FrontendPlanner } from "./plan.ts";
import { ROUTE_PROTO } from "./names.ts";
import { cleanupRedirect, renderRedirect } from "./render-redirect.ts";
import { TcpRelay } from "./tcp-relay.ts";
import { UdpRelay } from "./udp-relay.ts";

export interface UserspaceOptions {
  /** where `ip` and `nft` run (default: real processes) */
  exec?: Executor;
  /** UDP flow idle timeout (default: conntrack's 30 s) */
  udpIdleMs?: number;
}

type Relay = TcpRelay | UdpRelay;

interface Running {
  frontend: Frontend;
  relay: Relay;
  /** the port the relay listens on (redirect mode: ephemeral) */
  port: number;
}

export class UserspaceBackend implements FullStateBackend {
  readonly name = "userspace";
  readonly kind = "full";
  private readonly exec: Executor;
  private readonly log: Logger;
  private readonly routes: LocalRoutes;
  private readonly running = new Map<string, Running>();
  private readonly mode: "bind" | "redirect";
  /** the frontends as last planned (plan.ts) */
  private readonly planner = new FrontendPlanner();
  /** frontends with endpoints that could not listen (a port taken): tried again at each sync */
  private readonly unserved = new Set<string>();

  constructor(
    private readonly ctx: BackendContext,
    private readonly opts: UserspaceOptions = {},
  ) {
    this.exec = opts.exec ?? processExecutor();
    this.log = ctx.log.child("userspace");
    this.routes = new LocalRoutes(this.exec);
    this.mode = ctx.config.userspaceMode ?? "bind";
    const d = ctx.config.localDetect;
    // A relay sees a connection's source address, never the interface it came in on.
    if (d?.kind === "bridge" || d?.kind === "prefix")
      this.log.warn("detectLocalMode BridgeInterface/InterfaceNamePrefix: the userspace backend tells pods by clusterCIDRs only", {
        clusterCIDRs: ctx.config.clusterCIDRs.join(","),
      });
  }

  async setup(): Promise<void> {
    if (this.ctx.config.dryRun) return;
    if (this.mode === "bind") await this.routes.setup();
    else await this.exec.run(["nft", "-c", "-f", "-"], renderRedirect([], []));
    this.log.info("userspace proxy ready", { mode: this.mode });
  }

  async apply(state: NodeState, change: StateChange): Promise<void> {
    const nodeIPs = nodeIPsOf(state, this.ctx.config);
    const portIPs = await this.nodePortIPs(nodeIPs);
    // node ports follow the node's IPs: a change of them re-plans everything
    const full = change === null || !sameIPs(portIPs, this.planner.nodeIPs);
    const { touched, gone } = this.plan(state, full ? null : change, portIPs);
    if (this.ctx.config.dryRun) {
      const now = [...touched.values()].filter((f) => f !== undefined);
      this.ctx.out(full ? describe(this.planner.frontends.values(), this.mode) : describe(now, this.mode, gone));
      return;
    }
    // 1. relays that go: frontend removed, or its endpoints all gone
    for (const [key, f] of touched) {
      const r = this.running.get(key);
      if (!r || (f && hasEndpoints(f))) continue;
      this.running.delete(key);
      await r.relay.close();
    }
    // 2. bind mode: the service IPs local, before anything listens on them
    const ipsChanged = this.planner.takeIPsChanged();
    if (this.mode === "bind" && (full || ipsChanged)) await this.routes.sync(new Set(this.planner.serviceIPs.keys()));
    // 3. relays that stay take their new endpoints; new ones listen (and those that could not, again)
    for (const key of this.unserved) if (!touched.has(key)) touched.set(key, this.planner.frontends.get(key));
    this.unserved.clear();
    for (const f of touched.values()) {
      if (!f || !hasEndpoints(f)) continue;
      const r = this.running.get(f.key);
      if (r) {
        if (!sameFrontend(r.frontend, f)) r.relay.update(f);
        r.frontend = f;
        continue;
      }
      try {
        this.running.set(f.key, await this.start(f, nodeIPs));
      } catch (err) {
        // one port taken by another process must not stop the others: logged, tried again at the next sync
        this.unserved.add(f.key);
        this.log.warn("cannot listen, frontend not served", { frontend: f.key, service: f.service, err: errorMessage(err) });
      }
    }
    if (this.mode === "redirect") {
      const refused = [...this.planner.frontends.values()].filter((f) => !this.running.has(f.key));
      await this.exec.run(
        ["nft", "-f", "-"],
        renderRedirect(
          [...this.running.values()].map((r) => ({ frontend: r.frontend, port: r.port })),
          refused,
          nodeIPs,
        ),
      );
    }
    this.log.debug("relays", {
      running: this.running.size,
      frontends: this.planner.frontends.size,
      touched: touched.size,
      unserved: this.unserved.size,
    });
  }

  /** re-plans the services in `change` (plan.ts), logging each service port not proxied once */
  private plan(
    state: NodeState,
    change: StateChange,
    nodeIPs: readonly string[],
  ): { touched: Map<string, Frontend | undefined>; gone: Frontend[] } {
    // pods by source address: NodeCIDR's pod CIDRs, else the cluster CIDRs
    const d = this.ctx.config.localDetect;
    const opts = { nodeIPs, clusterCIDRs: d?.kind === "node-cidr" ? d.cidrs : this.ctx.config.clusterCIDRs };
    const { touched, gone, skipped } = this.planner.plan(state, change, opts);
    for (const reason of skipped) this.log.warn("service port not proxied", { reason });
    return { touched, gone };
  }

  /**
   * Where node ports listen: the node's IPs, or with --nodeport-addresses
   * CIDRs every address of the node inside them (read at each sync: an
   * address that appears later is listened on from the next sync on).
   */
  private async nodePortIPs(nodeIPs: readonly string[]): Promise<readonly string[]> {
    const config = { nodeIPs: [...nodeIPs], nodePortAddresses: this.ctx.config.nodePortAddresses };
    if (!needsInterfaceAddresses(config) || this.ctx.config.dryRun) return nodePortIPs(config);
    try {
      return nodePortIPs(config, parseIpAddrJson(await this.exec.run(["ip", "-j", "address", "show"])));
    } catch (err) {
      this.log.warn("cannot read the node's addresses for --nodeport-addresses: node ports keep their addresses", {
        err: errorMessage(err),
      });
      return this.planner.nodeIPs ?? nodePortIPs(config);
    }
  }

  private async start(f: Frontend, nodeIPs: readonly string[]): Promise<Running> {
    const listen = this.mode === "redirect" ? { host: f.family === "v4" ? "0.0.0.0" : "::", port: 0 } : undefined;
    const opts = { log: this.log, listen, idleMs: this.opts.udpIdleMs ?? udpIdleMs(this.ctx), nodeIPs };
    const relay = f.proto === "tcp" ? new TcpRelay(f, opts) : new UdpRelay(f, opts);
    const port = await relay.listen();
    return { frontend: f, relay, port };
  }

  /** open relayed connections (TCP) and flows (UDP) per frontend key: tests, bench */
  connections(): Map<string, number> {
    return new Map([...this.running].map(([k, r]) => [k, r.relay.connections]));
  }

  async cleanup(): Promise<void> {
    await this.close();
    if (this.ctx.config.dryRun) {
      this.ctx.out(
        `ip route flush table local proto ${ROUTE_PROTO}\nip -6 route flush table local proto ${ROUTE_PROTO}\n${cleanupRedirect()}`,
      );
      return;
    }
    await this.routes.cleanup();
    await this.exec.run(["nft", "-f", "-"], cleanupRedirect()).catch(() => {}); // no nft on the node: nothing of ours there
  }

  /**
   * Stops every relay. Unlike kernel rules, a process's relays cannot
   * outlive it: the routes stay (a restarted kpng listens again on the
   * service IPs) but connections end with the process.
   */
  async close(): Promise<void> {
    const all = [...this.running.values()];
    this.running.clear();
    await Promise.all(all.map((r) => r.relay.close()));
  }
}

/** the UDP idle timeout: kube-proxy's conntrack.udpTimeout when set, else the kernel's default 30 s */
const udpIdleMs = (ctx: BackendContext) => (ctx.config.conntrack?.udpTimeoutSeconds || 30) * 1000;

const address = (f: Frontend) => `${f.proto} ${f.ip.includes(":") ? `[${f.ip}]` : f.ip}:${f.port}`;

/** `--dry-run`: what the proxy would listen on, one frontend a line, then the frontends a partial sync removed */
export function describe(frontends: Iterable<Frontend>, mode: "bind" | "redirect", gone: Iterable<Frontend> = []): string {
  const byKey = (a: Frontend, b: Frontend) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  const lines = [...frontends].sort(byKey).map((f) => {
    const to = hasEndpoints(f) ? `relay to ${f.endpoints.join(" ") || "-"}` : "refused (no endpoints)";
    const extra = [
      f.shortCircuit ? `pods and this node: ${f.shortCircuit.endpoints.join(" ")}` : "",
      f.affinitySeconds !== undefined ? `affinity ${f.affinitySeconds}s` : "",
      f.sourceRanges ? `from ${f.sourceRanges.join(",") || "nobody"}` : "",
    ].filter(Boolean);
    return `${address(f)} ${f.service} ${to}${extra.length ? ` (${extra.join(", ")})` : ""}`;
  });
  for (const f of [...gone].sort(byKey)) lines.push(`${address(f)} gone`);
  return `# userspace (${mode} mode)\n${lines.join("\n")}\n`;
}

export const createUserspaceBackend = (ctx: BackendContext, opts: UserspaceOptions = {}) => new UserspaceBackend(ctx, opts);
