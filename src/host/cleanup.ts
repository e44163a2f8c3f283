// Rules that must go, beside kpng's own: with `--cleanup`, everything any
// mode ever created; at start-up, once kpng's rules are in, kube-proxy's
// (docs/operators.md, "Replace kube-proxy"). The sweeping itself (leftovers/)
// loads only when one of them runs.

import { errorMessage, KpngError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Backend, BackendContext } from "./backend.ts";

/** How kube-proxy's rules were written: its nftables mode, or iptables (and IPVS) modes through either iptables flavour. */
export type ForeignRules = "nftables" | "iptables-nft" | "iptables-legacy";

/**
 * One sign of another proxy (leftovers/foreign.ts looks for them). Declared
 * here, where the host hands them on, so that the host names no type of the
 * leftovers room, which it loads only when a sweep or the watch runs.
 */
export interface Sighting {
  proxy: "kube-proxy";
  rules: ForeignRules;
  family: "IPv4" | "IPv6";
  /** what was seen, as its tools name it: "table ip kube-proxy", "chain mangle KUBE-PROXY-CANARY" */
  what: string;
}

/** `--cleanup`: every backend removes what it ever created; then every mode's rules go, kpng's and kube-proxy's. */
export async function cleanupBackends(backends: readonly Backend[], ctx: BackendContext): Promise<void> {
  for (const b of backends) await b.cleanup?.(ctx);
  const { cleanupEveryMode } = await import("./leftovers/index.ts");
  const { failures, kubeProxyRemoved } = await cleanupEveryMode({ log: ctx.log.child("cleanup"), dryRun: ctx.config.dryRun, out: ctx.out });
  // Run as kube-proxy's init container, kube-proxy has no rules yet. Run late, beside a running
  // kube-proxy (a rollback whose cleanup was forgotten), its rules go too: its iptables mode puts
  // them back at its next canary check, its nftables mode not until it restarts.
  if (kubeProxyRemoved.length && !ctx.config.dryRun)
    ctx.log.warn(
      "kube-proxy's rules were removed too (--cleanup removes every mode's): if kube-proxy runs on this node, restart it (its nftables mode does not put them back by itself)",
      { removed: kubeProxyRemoved.join("; ") },
    );
  if (failures.length) throw new KpngError("internal", `cleanup: ${failures.length} removal(s) failed, first: ${failures[0]}`);
  ctx.log.info("cleanup done", { backends: backends.map((b) => b.name).join(",") });
}

/** Whether kube-proxy may have left rules the backends named replace (its modes: nftables, iptables, ipvs). */
export const replacesKubeProxy = (backends: readonly string[]): boolean =>
  backends.some((n) => n === "nft" || n === "iptables" || n === "ipvs");

/**
 * Once kpng's own rules are in (every backend synced once), kube-proxy's go;
 * a failure is a warning. With `report` (a long run, not --once), kpng then
 * watches for them coming back (leftovers/foreign.ts): said, never fought.
 */
export async function removeKubeProxyRules(
  backends: readonly string[],
  log: Logger,
  report?: (sign: Sighting, present: boolean) => void,
): Promise<void> {
  if (!replacesKubeProxy(backends)) return;
  const { migrateFromKubeProxy } = await import("./leftovers/index.ts");
  await migrateFromKubeProxy({ log: log.child("migrate"), backends }).catch((err: unknown) =>
    log.warn("cannot remove kube-proxy's rules", { err: errorMessage(err) }),
  );
  if (!report) return;
  const [{ ForeignProxyWatch }, { kernelProbe }] = await Promise.all([
    import("./leftovers/foreign.ts"),
    import("./leftovers/foreign-probe.ts"),
  ]);
  const flog = log.child("foreign-proxy");
  new ForeignProxyWatch({ probe: kernelProbe({ log: flog }), log: flog, report }).start();
}
