// The conntrack sysctls kube-proxy sets at start-up (pkg/proxy/conntrack/
// sysctls.go, kube-proxy 1.36), with its formulas:
//   nf_conntrack_max = maxPerCore x CPUs, at least `min`, at most 1,048,576;
//     only ever raised (never lowered), 0 maxPerCore = leave it;
//   hashsize (a module parameter in /sys) raised to max/4 when smaller;
//   nf_conntrack_tcp_timeout_established / _close_wait, nf_conntrack_udp_timeout
//     / _stream: set when configured above 0 (to exactly that value);
//   nf_conntrack_tcp_be_liberal = 1 when tcpBeLiberal.
// The timeouts are per network namespace; nf_conntrack_max and hashsize are
// the host's (read-only from other namespaces, and in containers with a
// read-only /proc/sys or /sys).
//
// Where kpng differs on purpose: a node-wide limit that cannot be written
// there (read-only, or no nf_conntrack module loaded yet) is a WARN line and
// start-up goes on, as kube-proxy did up to 1.28 (its "/sys is read-only"
// event); kube-proxy 1.36 fails instead. Any other failure stops start-up with
// kube-proxy's message.
//
// `planConntrack` is pure; `applyConntrack` is the executor, rooted at
// directories that tests point at a scratch tree (never the host's values).

import { readFile, writeFile as writeFileNode } from "node:fs/promises";
import { cpus } from "node:os";
import { KpngError } from "../errors.ts";
import { parseGoDuration } from "../config/duration.ts";
import type { Logger } from "../log.ts";

/** kube-proxy's KubeProxyConntrackConfiguration as the config document holds it. */
export interface ConntrackConfig {
  maxPerCore: number;
  min: number;
  tcpEstablishedTimeout: string;
  tcpCloseWaitTimeout: string;
  tcpBeLiberal: boolean;
  udpTimeout: string;
  udpStreamTimeout: string;
}

/** kube-proxy caps the scaled limit: each entry costs kernel memory on many-core machines. */
export const CONNTRACK_MAX_LIMIT = 1_048_576;

export interface ConntrackPlan {
  /** nf_conntrack_max to raise to (and hashsize to max/4); 0 = leave both */
  max: number;
  /** per-namespace sysctls under net/netfilter, set to exactly these values */
  set: Array<{ key: string; value: number }>;
}

/** kube-proxy's getConntrackMax. */
export function conntrackMax(c: Pick<ConntrackConfig, "maxPerCore" | "min">, numCPU: number): number {
  if (!(c.maxPerCore > 0)) return 0;
  const scaled = c.maxPerCore * numCPU;
  if (scaled > CONNTRACK_MAX_LIMIT) return CONNTRACK_MAX_LIMIT;
  return Math.max(scaled, c.min);
}

const seconds = (d: string) => Math.floor(parseGoDuration(d) ?? 0);

export function planConntrack(c: ConntrackConfig, numCPU: number): ConntrackPlan {
  const set: ConntrackPlan["set"] = [];
  const timeout = (key: string, d: string) => {
    if (seconds(d) > 0) set.push({ key, value: seconds(d) });
  };
  timeout("nf_conntrack_tcp_timeout_established", c.tcpEstablishedTimeout);
  timeout("nf_conntrack_tcp_timeout_close_wait", c.tcpCloseWaitTimeout);
  if (c.tcpBeLiberal) set.push({ key: "nf_conntrack_tcp_be_liberal", value: 1 });
  timeout("nf_conntrack_udp_timeout", c.udpTimeout);
  timeout("nf_conntrack_udp_timeout_stream", c.udpStreamTimeout);
  return { max: conntrackMax(c, numCPU), set };
}

export interface SysctlRoots {
  /** default /proc/sys */
  procSys?: string;
  /** default /sys (module parameters, online CPUs) */
  sys?: string;
}

/** "0-3,6" (the kernel's cpulist) -> 5. */
export function countCPUList(list: string): number {
  let n = 0;
  for (const part of list.trim().split(",").filter(Boolean)) {
    const [a, b] = part.split("-").map(Number);
    n += b === undefined ? 1 : b - a + 1;
  }
  return n;
}

/** The node's online CPUs (not this process's cpuset), as kube-proxy's DetectNumCPU. */
export async function detectNumCPU(roots: SysctlRoots = {}): Promise<number> {
  try {
    const n = countCPUList(await readFile(`${roots.sys ?? "/sys"}/devices/system/cpu/online`, "utf8"));
    if (n > 0) return n;
  } catch {
    // fall back to what the runtime sees
  }
  return Math.max(1, cpus().length);
}

const readInt = async (path: string): Promise<number | undefined> => {
  try {
    const n = Number.parseInt((await readFile(path, "utf8")).trim(), 10);
    return Number.isNaN(n) ? undefined : n;
  } catch {
    return undefined;
  }
};

const code = (err: unknown) => (err as NodeJS.ErrnoException).code ?? String(err);
/** Errors meaning "not writable from here": a read-only mount, a 0444 sysctl (another netns), a module parameter outside the initial netns, no module. */
const NOT_HERE = new Set(["EROFS", "EACCES", "EPERM", "EOPNOTSUPP", "ENOENT"]);

/** Applies a plan: raises the node-wide limits where it can, sets the per-namespace values; logs each write as kube-proxy does. */
export async function applyConntrack(
  plan: ConntrackPlan,
  opts: { log: Logger; roots?: SysctlRoots; write?: (path: string, text: string) => Promise<void> },
): Promise<void> {
  const writeFile = opts.write ?? writeFileNode;
  const procSys = opts.roots?.procSys ?? "/proc/sys";
  const hashsizeFile = `${opts.roots?.sys ?? "/sys"}/module/nf_conntrack/parameters/hashsize`;
  const failed = (what: string, err: unknown) =>
    new KpngError("unavailable", `could not set conntrack parameters from kube-proxy configuration: ${what}: ${code(err)}`);
  if (plan.max > 0) {
    const entry = "net/netfilter/nf_conntrack_max";
    try {
      const cur = await readInt(`${procSys}/${entry}`);
      if (cur === undefined || cur < plan.max) {
        opts.log.info("Setting nf_conntrack_max", { nfConntrackMax: plan.max });
        await writeFile(`${procSys}/${entry}`, String(plan.max));
      }
      const hashsize = await readInt(hashsizeFile);
      if (hashsize === undefined || hashsize < Math.floor(plan.max / 4)) {
        opts.log.info("Setting conntrack hashsize", { conntrackHashsize: Math.floor(plan.max / 4) });
        await writeFile(hashsizeFile, String(Math.floor(plan.max / 4)));
      }
    } catch (err) {
      if (!NOT_HERE.has(code(err))) throw failed(entry, err);
      opts.log.warn(
        "cannot raise the node's conntrack limits from here (read-only /proc/sys or /sys, another network namespace, or nf_conntrack not loaded): problems may arise later",
        {
          nfConntrackMax: plan.max,
          error: code(err),
        },
      );
    }
  }
  for (const { key, value } of plan.set) {
    const entry = `net/netfilter/${key}`;
    if ((await readInt(`${procSys}/${entry}`)) === value) continue;
    opts.log.info("Set sysctl", { entry, value });
    try {
      await writeFile(`${procSys}/${entry}`, String(value));
    } catch (err) {
      throw failed(entry, err);
    }
  }
}
