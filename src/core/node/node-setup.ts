// What kpng sets on its node before the rules go in, as kube-proxy does at
// start-up: its own OOM score, and the conntrack sysctls (conntrack-sysctl.ts
// plans and writes them). Neither is done by a dry run: it does not own the node.

import { writeFileSync } from "node:fs";
import type { Config } from "../config/config.ts";
import { errorMessage } from "../errors.ts";
import type { Logger } from "../log.ts";
import { applyConntrack, detectNumCPU, planConntrack } from "./conntrack-sysctl.ts";

/**
 * kube-proxy's linux.oomScoreAdj (-999 by default): the node's proxy is among
 * the last processes the OOM killer picks. Needs CAP_SYS_RESOURCE to lower it.
 */
export function applyOOMScoreAdj(cfg: Config, log: Logger): void {
  if (cfg.dryRun || process.platform !== "linux") return;
  try {
    writeFileSync("/proc/self/oom_score_adj", String(cfg.kubeProxy.linux.oomScoreAdj));
  } catch (err) {
    log.warn("could not set oom_score_adj", {
      value: cfg.kubeProxy.linux.oomScoreAdj,
      error: (err as NodeJS.ErrnoException).code ?? errorMessage(err),
    });
  }
}

/** Built-in backends that program netfilter and so rely on conntrack: kube-proxy sets its sysctls for each of its Linux modes. */
const CONNTRACK_BACKENDS = new Set(["nft", "iptables", "ipvs", "ebpf"]);

/** Whether the backends named rely on conntrack (plugins, userspace and winkernel do not ask for its sysctls). */
export const usesConntrack = (backends: readonly string[]): boolean => backends.some((b) => CONNTRACK_BACKENDS.has(b));

/** kube-proxy's conntrack sysctls, on Linux, for backends that use conntrack. */
export async function setConntrack(cfg: Config, backends: readonly string[], log: Logger): Promise<void> {
  if (process.platform !== "linux" || !usesConntrack(backends)) return;
  const plan = planConntrack(cfg.kubeProxy.linux.conntrack, await detectNumCPU());
  if (cfg.dryRun)
    return log
      .v(2)
      .info("conntrack sysctls not set (dry run)", { nfConntrackMax: plan.max, set: plan.set.map((s) => `${s.key}=${s.value}`).join(",") });
  await applyConntrack(plan, { log });
}
