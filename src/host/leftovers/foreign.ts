// Two proxies on one node. Once kpng has removed kube-proxy's rules at
// start-up (index.ts migrateFromKubeProxy), their coming back means another
// proxy is programming this node: a kube-proxy DaemonSet re-installed (by
// `kubeadm upgrade apply`, which re-creates it while the kube-system/kube-proxy
// ConfigMap exists), or never removed. kpng says so loudly — a WARN naming
// what it saw, and the gauge kpng_foreign_proxy_detected — and leaves them.
//
// Why kpng does not delete them again: kube-proxy puts them back at its next
// sync (iptables mode watches its canary chains for exactly that), so the
// two would flap, each sweep a burst of work on both sides, and the operator
// would see a quiet fight instead of a message. kube-proxy's rules live in
// their own nftables table or KUBE- chains beside kpng's, so both rule sets
// DNAT to the same endpoints while the two agree; what is wrong is the
// second proxy, which only the operator can remove.
//
// Why /healthz stays as it is: it answers whether kpng's own rules are
// current (kube-proxy's meaning, read by load balancers for
// externalTrafficPolicy=Cluster and by liveness probes). They are; a 503
// would take a node that serves out of load balancers, or restart kpng in a
// loop, and neither removes the other proxy.
//
// What is looked at (foreign-probe.ts), each a question whose answer is one
// object, so the cost does not grow with anyone's ruleset: kube-proxy's
// nftables tables (nftables mode), and the KUBE-PROXY-CANARY chain of the
// mangle table (iptables and IPVS modes create it at start-up: the mangle
// table, because it is small, is where kube-proxy itself looks), of both
// iptables flavours and families.

import type { Logger } from "../../core/log.ts";
import type { Sighting } from "../cleanup.ts";

// declared by the host (cleanup.ts), which hands the sightings on without loading this room
export type { ForeignRules, Sighting } from "../cleanup.ts";

export interface ForeignProbe {
  /** every sign that can be looked for (each reported as absent at first) */
  readonly targets: readonly Sighting[];
  /** the signs present now; a part that cannot be asked is skipped (and said once by the probe) */
  look(): Promise<Sighting[]>;
}

/** where the gauge lives (ProxyMetrics.foreignProxy, through the late servers) */
export type ForeignReport = (s: Sighting, present: boolean) => void;

export interface ForeignWatchOptions {
  probe: ForeignProbe;
  log: Logger;
  report?: ForeignReport;
  /** how often the probe runs (default FOREIGN_CHECK_MS) */
  periodMs?: number;
}

/** kube-proxy's own iptables canary period is its syncPeriod (30 s); kpng's is 5 s; the probe costs a few netlink messages */
export const FOREIGN_CHECK_MS = 10_000;

export const sightingKey = (s: Sighting) => `${s.rules} ${s.family} ${s.what}`;

export class ForeignProxyWatch {
  private seen = new Map<string, Sighting>();
  private timer?: ReturnType<typeof setInterval>;
  private running?: Promise<void>;

  constructor(private readonly opts: ForeignWatchOptions) {}

  /** Reports every target as absent, looks once now, then every period. */
  start(): void {
    for (const t of this.opts.probe.targets) this.opts.report?.(t, false);
    void this.check();
    this.timer = setInterval(() => void this.check(), this.opts.periodMs ?? FOREIGN_CHECK_MS);
    this.timer.unref?.();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One look; changes since the last are logged and reported. Never two at once. */
  check(): Promise<void> {
    this.running ??= this.look().finally(() => (this.running = undefined));
    return this.running;
  }

  private async look(): Promise<void> {
    const { log, report } = this.opts;
    const now = new Map<string, Sighting>();
    for (const s of await this.opts.probe.look()) now.set(sightingKey(s), s);
    for (const [k, s] of now) {
      if (this.seen.has(k)) continue;
      log.warn(
        "another proxy is programming this node: kube-proxy's rules came back after kpng removed them; kpng leaves them in place (removing them again would only flap): remove kube-proxy from this node",
        { proxy: s.proxy, rules: s.rules, family: s.family, saw: s.what },
      );
      report?.(s, true);
    }
    for (const [k, s] of this.seen) {
      if (now.has(k)) continue;
      log.info("kube-proxy's rules are gone again", { proxy: s.proxy, rules: s.rules, family: s.family, saw: s.what });
      report?.(s, false);
    }
    this.seen = now;
  }
}
