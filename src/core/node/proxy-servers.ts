// What a kube-proxy runs beside its rules, wired for the run command: the
// health server (/healthz, /livez), the metrics server (/metrics,
// /proxyMode), and the health-check node ports, all fed from node-local
// revisions and backend syncs.
//
// A --dry-run does not own the node: it opens these only when asked for
// explicitly (a non-default address, or nodePortAddresses), and a port it
// cannot bind is a warning, never fatal.

import type { Brain, Revision } from "../brain/brain.ts";
import type { Config } from "../config/config.ts";
import { errorMessage, isUnavailable } from "../errors.ts";
import { nodeIsEligible, ProxyHealth, startHealthServer, type Stamp } from "./health.ts";
import { HealthCheckPorts, healthCheckAddresses, hostAddresses } from "./healthcheck-ports.ts";
import type { HttpServer } from "./http-serve.ts";
import { defaultKubeProxyConfig, modeOfBackend } from "../config/kube-proxy-config.ts";
import type { Logger } from "../log.ts";
import { type ForeignProxySign, ProxyMetrics, startMetricsServer } from "./metrics.ts";
import type { Source } from "../sources/index.ts";
import type { NodeState, StateChange } from "../brain/state.ts";

const RETRY_BIND_MS = 5000;

export interface ProxyServersOptions {
  cfg: Config;
  brain: Brain;
  log: Logger;
  /** names of the running backends */
  backends: readonly string[];
}

/** What the run command tells its servers as it happens (`at`: when it happened, if it is told later: late-servers.ts). */
export interface ProxyReports {
  /** the source's counters, once it runs */
  setSource(source: Pick<Source, "stats" | "globalStats">): void;
  /** a revision is about to be pushed to every backend */
  queued(rev: Revision, at?: Stamp): void;
  synced(backend: string, state: NodeState, seconds: number, change: StateChange, at?: Stamp): void;
  failed(backend: string, err: unknown): void;
  /** `backend` reported its rules changed or removed by someone else (a full sync follows) */
  rulesLost(backend: string, reason: string): void;
  /** another proxy's sign seen on the node, or gone (/healthz does not change: leftovers/foreign.ts says why) */
  foreignProxy(sign: ForeignProxySign, present: boolean): void;
}

export interface ProxyServers extends ProxyReports {
  readonly health: ProxyHealth;
  readonly metrics: ProxyMetrics;
  /** http://… of the health and metrics servers, when they run */
  readonly urls: { healthz?: string; metrics?: string };
  close(): void;
}

export function startProxyServers(opts: ProxyServersOptions): ProxyServers {
  const { cfg, brain, log } = opts;
  const defaults = defaultKubeProxyConfig();
  let source: Pick<Source, "stats" | "globalStats"> | undefined;
  const health = new ProxyHealth({
    timeoutMs: 2 * cfg.syncPeriodSeconds * 1000,
    nodeEligible: () => nodeIsEligible(brain.cluster.nodes.get(cfg.nodeName) as never),
    sourceStale: () => (source?.stats?.stale.length ?? 0) > 0,
  });
  const metrics = new ProxyMetrics({ brain, backends: opts.backends, source: () => source?.stats });
  const servers: HttpServer[] = [];
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const urls: ProxyServers["urls"] = {};
  const hardFail = cfg.kubeProxy.bindAddressHardFail && !cfg.dryRun;

  /** kube-proxy's bindAddressHardFail: exit when the port is taken, or keep trying every 5s. */
  const serve = (what: "healthz" | "metrics", address: string, start: () => HttpServer) => {
    if (address === "") return;
    if (cfg.dryRun && address === (what === "healthz" ? defaults.healthzBindAddress : defaults.metricsBindAddress)) return;
    const attempt = () => {
      try {
        const s = start();
        servers.push(s);
        urls[what] = s.url;
      } catch (err) {
        if (hardFail || !isUnavailable(err)) throw err;
        log.error(`${what} server not started, retrying`, { error: errorMessage(err), retryInMs: RETRY_BIND_MS });
        const t = setTimeout(() => {
          timers.delete(t);
          try {
            attempt();
          } catch (e) {
            log.error(`${what} server not started`, { error: errorMessage(e) });
          }
        }, RETRY_BIND_MS);
        timers.add(t);
      }
    };
    attempt();
  };

  serve("healthz", cfg.healthzBindAddress, () =>
    startHealthServer({ address: cfg.healthzBindAddress, health, log, onAnswer: (path, code) => metrics.answered(path, code) }),
  );
  const proxyMode = opts.backends.map((b) => modeOfBackend(b) || b).join(",");
  serve("metrics", cfg.metricsBindAddress, () =>
    startMetricsServer({ address: cfg.metricsBindAddress, metrics, proxyMode, config: cfg.kubeProxy, log }),
  );

  let hcPorts: HealthCheckPorts | null | undefined;
  let hcNodeIPs: readonly string[] | undefined;
  /** the health-check servers, listening where the node's IPs of `state` say (states share the array until it changes) */
  const healthChecks = (state: NodeState) => {
    const ips = state.nodeIPs ?? cfg.nodeIPs;
    const addresses = () =>
      healthCheckAddresses({ nodePortAddresses: cfg.nodePortAddresses, nodeIPs: ips, hostAddresses: hostAddresses() });
    if (hcPorts === undefined) {
      const explicit = cfg.nodePortAddresses.length > 0;
      hcPorts =
        cfg.dryRun && !explicit ? null : new HealthCheckPorts({ addresses: addresses(), proxyHealthy: () => health.isHealthy(), log });
    } else if (hcPorts && ips !== hcNodeIPs) hcPorts.retarget(addresses());
    hcNodeIPs = ips;
    return hcPorts;
  };

  return {
    health,
    metrics,
    urls,
    setSource(s) {
      source = s;
      if (s.globalStats) metrics.followGlobal(s.globalStats);
    },
    queued(rev, at) {
      for (const b of opts.backends) health.queued(b, rev.state.rev, at);
      metrics.queued(rev, at?.wall);
      healthChecks(rev.state)?.update(rev.state, rev.change);
    },
    synced(backend, state, seconds, change, at) {
      health.updated(backend, state.rev, at);
      metrics.synced(backend, state, seconds, change, at?.wall);
    },
    failed(backend) {
      health.failed(backend);
      metrics.failed(backend);
    },
    rulesLost(backend) {
      health.rulesLost(backend);
      metrics.rulesLost(backend);
    },
    foreignProxy(sign, present) {
      metrics.foreignProxy(sign, present);
    },
    close() {
      for (const t of timers) clearTimeout(t);
      for (const s of servers) s.close();
      hcPorts?.close();
    },
  };
}
