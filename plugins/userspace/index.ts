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
//             (redirect.ts); needs nft.
// Node ports listen on the node IPs in both modes.
//
// Full state: each apply re-plans every frontend (a few per service) and
// acts on the difference; relays that stay keep their connections, and a
// changed endpoint set closes only the connections of endpoints that left.

import { errorMessage } from "../../src/core/errors.ts";
import type { Logger } from "../../src/core/log.ts";
import type { NodeState, StateChange } from "../../src/core/brain/state.ts";
import { nodeIPsOf, type BackendContext, type BackendFactory, type Executor, type FullStateBackend } from "../../src/plugins/backend.ts";
import { LocalRoutes } from "./local-routes.ts";
import { processExecutor } from "./executor.ts";
import { hasEndpoints, planFrontends, sameFrontend, serviceAddresses, type Frontend } from "./frontends.ts";
import { ROUTE_PROTO } from "./names.ts";
import { cleanupRedirect, renderRedirect } from "./redirect.ts";
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
  private skippedSeen = new Set<string>();

  constructor(
    private readonly ctx: BackendContext,
    private readonly opts: UserspaceOptions = {},
  ) {
    this.exec = opts.exec ?? processExecutor();
    this.log = ctx.log.child("userspace");
    this.routes = new LocalRoutes(this.exec);
    this.mode = ctx.config.userspaceMode ?? "bind";
  }

  async setup(): Promise<void> {
    if (this.ctx.config.nodePortAddresses.some((a) => a !== "primary")) {
      this.log.warn("--nodeport-addresses CIDRs are not supported by the userspace backend: node ports listen on the node's IPs", { nodePortAddresses: this.ctx.config.nodePortAddresses.join(",") });
    }
    if (this.ctx.config.dryRun) return;
    if (this.mode === "bind") await this.routes.setup();
    else await this.exec.run(["nft", "-c", "-f", "-"], renderRedirect([], []));
    this.log.info("userspace proxy ready", { mode: this.mode });
  }

  async apply(state: NodeState, _change: StateChange): Promise<void> {
    const nodeIPs = nodeIPsOf(state, this.ctx.config);
    const plan = planFrontends(state, { nodeIPs, clusterCIDRs: this.ctx.config.clusterCIDRs });
    for (const s of plan.skipped) {
      if (this.skippedSeen.has(s)) continue;
      this.skippedSeen.add(s);
      this.log.warn("service port not proxied", { reason: s });
    }
    const wanted = [...plan.frontends.values()];
    if (this.ctx.config.dryRun) {
      this.ctx.out(describe(wanted, this.mode));
      return;
    }
    // 1. relays that go: frontend removed, or its endpoints all gone
    for (const [key, r] of this.running) {
      const f = plan.frontends.get(key);
      if (f && hasEndpoints(f)) continue;
      this.running.delete(key);
      await r.relay.close();
    }
    // 2. bind mode: the service IPs local, before anything listens on them
    if (this.mode === "bind") await this.routes.sync(serviceAddresses(wanted));
    // 3. relays that stay take their new endpoints; new ones listen
    const failures: string[] = [];
    for (const f of wanted) {
      if (!hasEndpoints(f)) continue;
      const r = this.running.get(f.key);
      if (r) {
        if (!sameFrontend(r.frontend, f)) r.relay.update(f);
        r.frontend = f;
        continue;
      }
      try {
        this.running.set(f.key, await this.start(f, nodeIPs));
      } catch (err) {
        // one port taken by another process must not stop the others: logged, tried again next sync
        failures.push(f.key);
        this.log.warn("cannot listen, frontend not served", { frontend: f.key, service: f.service, err: errorMessage(err) });
      }
    }
    if (this.mode === "redirect") {
      const refused = wanted.filter((f) => !this.running.has(f.key));
      await this.exec.run(["nft", "-f", "-"], renderRedirect([...this.running.values()].map((r) => ({ frontend: r.frontend, port: r.port })), refused, nodeIPs));
    }
    this.log.debug("relays", { running: this.running.size, frontends: wanted.length, failed: failures.length });
  }

  private async start(f: Frontend, nodeIPs: readonly string[]): Promise<Running> {
    const listen = this.mode === "redirect" ? { host: f.family === 4 ? "0.0.0.0" : "::", port: 0 } : undefined;
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
      this.ctx.out(`ip route flush table local proto ${ROUTE_PROTO}\nip -6 route flush table local proto ${ROUTE_PROTO}\n${cleanupRedirect()}`);
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

/** `--dry-run`: what the proxy would listen on, one frontend a line */
export function describe(frontends: readonly Frontend[], mode: "bind" | "redirect"): string {
  const lines = [...frontends]
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map((f) => {
      const at = `${f.proto} ${f.ip.includes(":") ? `[${f.ip}]` : f.ip}:${f.port}`;
      const to = hasEndpoints(f) ? `relay to ${f.endpoints.join(" ") || "-"}` : "refused (no endpoints)";
      const extra = [
        f.shortCircuit ? `pods and this node: ${f.shortCircuit.endpoints.join(" ")}` : "",f.affinitySeconds !== undefined ? `affinity ${f.affinitySeconds}s` : "", f.sourceRanges ? `from ${f.sourceRanges.join(",") || "nobody"}` : ""].filter(Boolean);
      return `${at} ${f.service} ${to}${extra.length ? ` (${extra.join(", ")})` : ""}`;
    });
  return `# userspace (${mode} mode)\n${lines.join("\n")}\n`;
}

export const createUserspaceBackend = (ctx: BackendContext, opts: UserspaceOptions = {}) => new UserspaceBackend(ctx, opts);

const factory = ((ctx: BackendContext) => new UserspaceBackend(ctx)) satisfies BackendFactory;
export default factory;
