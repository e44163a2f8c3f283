// The IPVS backend (full-state model). Each apply renders the changed
// services, plans against the kernel picture and runs at most one command per
// tool. A full sync (first apply, `change === null`, or after any failure)
// re-reads the kernel, so it also converges after a restart or an operator's
// edit; partial syncs trust the picture that the last successful sync left.

import { type BackendContext, errorMessage, type Executor, FAMILIES, familiesOf, type Family, type FullStateBackend, invalid, ipVersion, needsInterfaceAddresses, parseIpAddrJson, nodeIPsOf, nodePortIPs, type NodeState, sameIPs, type StateChange } from "../../src/plugins/toolkit/index.ts";
import { baseJumps, chains, dummyInterface, setIds, setName, sysctls } from "./names.ts";
import { type KernelModel, type Transaction, emptyKernel, operationCount, vsKey } from "./model.ts";
import { type RenderContext, renderService } from "./render-service.ts";
import { DesiredState, commit, drainingServices, noneTouched, planChanges, planDrain } from "./plan.ts";
import { printAddresses, printIpset, printIpvsadm, printSetCreates, serviceFlag } from "./print.ts";
import { iptablesRules, jumpArgv, printIptablesRestore, restoreArgv } from "./render-iptables.ts";
import { parseIpvsConnections, parseKernel } from "./parse.ts";

/** Upstream kube-proxy's start-up warning for IPVS mode (cmd/kube-proxy/app/server_linux.go, KEP-5495). */
export const IPVS_DEPRECATION_MESSAGE =
  "The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead.";
/** Reason of the Node Warning event upstream records with that message. */
export const IPVS_DEPRECATION_REASON = "IPVSDeprecation";

/** Schedulers the kernel ships (ipvsadm(8)); anything else fails at every sync, so refuse it up front. */
export const ipvsSchedulers = ["rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"];

export interface IpvsBackendOptions {
  executor: Executor;
  /** how often draining real servers are checked; 0 = only through drain() (upstream: one minute) */
  drainIntervalMs?: number;
}

export interface SyncStats {
  full: boolean;
  operations: number;
  commands: number;
}

export interface IpvsBackend extends FullStateBackend {
  /** Deletes draining real servers whose connections are over; returns how many. */
  drain(): Promise<number>;
  /** figures of the last apply, for logs, tests and benchmarks */
  readonly last: SyncStats;
}

export function createIpvsBackend(ctx: BackendContext, opts: IpvsBackendOptions): IpvsBackend {
  const { config, log } = ctx;
  const exec = opts.executor;
  const scheduler = config.ipvs.scheduler || "rr";
  if (!ipvsSchedulers.includes(scheduler)) {
    throw invalid(`config ipvs.scheduler: "${scheduler}" is not an IPVS scheduler (one of ${ipvsSchedulers.join(", ")})`);
  }
  const families = familiesOf(config);
  const ourSets = new Set([...families].flatMap((f) => setIds.map((id) => setName(id, f))));
  const renderCtx: RenderContext = { scheduler, families, nodePortIPs: nodePortIPs(config) };
  /** what renderCtx.nodePortIPs was computed from: the node's IPs, this host's addresses */
  let nodeIPs: readonly string[] = config.nodeIPs;
  let interfaceAddrs: string[] = [];

  let desired = new DesiredState();
  let kernel: KernelModel = emptyKernel();
  // Until a sync succeeds the kernel picture cannot be trusted: the next sync re-reads it.
  let needFull = true;
  let timer: ReturnType<typeof setInterval> | undefined;
  let queue: Promise<unknown> = Promise.resolve();
  const last: SyncStats = { full: false, operations: 0, commands: 0 };
  let commands = 0;

  const run = (argv: string[], stdin?: string) => {
    commands++;
    return exec.run(argv, stdin);
  };
  /** One sync or drain at a time: the drain timer must not interleave with an apply. */
  const serialize = <T>(fn: () => Promise<T>): Promise<T> => {
    const p = queue.then(fn);
    queue = p.catch(() => undefined);
    return p;
  };

  async function readKernel(): Promise<KernelModel> {
    const ipvsSave = await run(["ipvsadm", "-Sn"]);
    const ipsetSave = await run(["ipset", "save"]);
    const dummyAddrs = await run(["ip", "-j", "addr", "show", "dev", dummyInterface]);
    return parseKernel({ ipvsSave, ipsetSave, dummyAddrs, ourSets });
  }

  async function ensureJumps(family: Family) {
    for (const j of baseJumps) {
      if (config.dryRun) {
        await run(jumpArgv(family, "-I", j));
        continue;
      }
      try {
        await run(jumpArgv(family, "-C", j));
      } catch {
        await run(jumpArgv(family, "-I", j));
      }
    }
  }

  async function execute(tx: Transaction, full: boolean) {
    if (full) {
      // Sets first: the iptables rules reference them.
      await run(["ipset", "restore"], printSetCreates(families) + printIpset(tx.sets));
      for (const f of families) {
        await run(restoreArgv(f), printIptablesRestore(iptablesRules(f, config))).catch((err) => {
          ctx.metrics?.transactionFailed("ipvs", ipVersion(f), false);
          throw err;
        });
        await ensureJumps(f);
      }
    } else if (tx.sets.length) {
      await run(["ipset", "restore"], printIpset(tx.sets));
    }
    if (tx.ipvs.length) await run(["ipvsadm", "-R"], printIpvsadm(tx.ipvs));
    if (tx.addresses.length) await run(["ip", "-batch", "-"], printAddresses(tx.addresses));
  }

  async function sync(state: NodeState, change: StateChange) {
    const ips = nodeIPsOf(state, config);
    if (!sameIPs(ips, nodeIPs)) {
      // Node ports answer on the node's IPs: every node-port virtual server moves (a full sync).
      nodeIPs = ips;
      renderCtx.nodePortIPs = nodePortIPs({ ...config, nodeIPs: [...ips] }, interfaceAddrs);
      needFull = true;
    }
    const full = change === null || needFull;
    needFull = true;
    commands = 0;
    const touched = noneTouched();
    if (full) {
      desired = new DesiredState();
      for (const [key, se] of state.services) desired.set(key, renderService(se, renderCtx), touched);
      kernel = config.dryRun ? emptyKernel() : await readKernel();
      for (const k of kernel.virtualServices.keys()) touched.vs.add(k);
      for (const a of kernel.addresses) touched.addresses.add(a);
      for (const e of kernel.entries) touched.entries.add(e);
    } else {
      for (const key of change) {
        const se = state.services.get(key);
        desired.set(key, se && renderService(se, renderCtx), touched);
      }
    }
    const conflicts = desired.conflicts(touched.vs);
    if (conflicts.length) log.warn("several services claim one virtual server; the first by name wins", { virtualServers: conflicts });
    const tx = planChanges(desired, kernel, touched);
    await execute(tx, full);
    commit(kernel, tx);
    needFull = false;
    Object.assign(last, { full, operations: operationCount(tx), commands });
    log.debug("synced", { rev: state.rev, ...last });
  }

  async function drainNow(): Promise<number> {
    if (config.dryRun) return 0;
    const draining = drainingServices(kernel);
    if (!draining.length) return 0;
    const connections = new Map<string, Map<string, number>>();
    for (const v of draining) {
      try {
        const text = await exec.run(["ipvsadm", "-Ln", "--exact", ...serviceFlag(v.vs).split(" ")]);
        connections.set(vsKey(v.vs), parseIpvsConnections(text));
      } catch (err) {
        log.debug("cannot read connections; will retry", { virtualServer: vsKey(v.vs), error: errorMessage(err) });
      }
    }
    const tx = planDrain(draining, connections);
    if (!tx.ipvs.length) return 0;
    await exec.run(["ipvsadm", "-R"], printIpvsadm(tx.ipvs));
    commit(kernel, tx);
    return tx.ipvs.length;
  }

  return {
    name: "ipvs",
    kind: "full",
    nodeWarning: { reason: IPVS_DEPRECATION_REASON, note: IPVS_DEPRECATION_MESSAGE },
    last,
    async setup() {
      log.warn(IPVS_DEPRECATION_MESSAGE, { reason: IPVS_DEPRECATION_REASON });
      // Probe first: on a kernel without IPVS this is the one clear error the operator sees.
      if (!config.dryRun) await run(["ipvsadm", "-Ln", "--timeout"]);
      await run(["sysctl", "-w", ...sysctls.map(([k, v]) => `${k}=${v}`)]);
      if (config.dryRun) await run(["ip", "link", "add", dummyInterface, "type", "dummy"]);
      else {
        try {
          await run(["ip", "link", "show", dummyInterface]);
        } catch {
          await run(["ip", "link", "add", dummyInterface, "type", "dummy"]);
        }
      }
      if (needsInterfaceAddresses(config) && !config.dryRun) {
        interfaceAddrs = parseIpAddrJson(await run(["ip", "-j", "addr", "show"]), { exclude: dummyInterface });
        renderCtx.nodePortIPs = nodePortIPs({ ...config, nodeIPs: [...nodeIPs] }, interfaceAddrs);
      }
      if (!config.dryRun && (opts.drainIntervalMs ?? 60_000) > 0) {
        timer = setInterval(() => {
          serialize(drainNow).catch((err: unknown) => log.warn("draining real servers failed", { error: errorMessage(err) }));
        }, opts.drainIntervalMs ?? 60_000);
        timer.unref?.();
      }
    },
    apply(state, change) {
      return serialize(() => sync(state, change));
    },
    drain() {
      return serialize(drainNow);
    },
    async close() {
      if (timer) clearInterval(timer);
      await queue;
    },
    async cleanup() {
      await serialize(() => cleanupAll(exec, families, (msg, err) => log.warn(msg, { error: errorMessage(err) })));
      needFull = true;
    },
  };
}

/** `--cleanup`: everything IPVS mode created, best effort (a piece already gone is fine). */
async function cleanupAll(exec: Executor, families: ReadonlySet<Family>, warn: (msg: string, err: unknown) => void) {
  const attempt = async (argv: string[], stdin?: string) => {
    try {
      await exec.run(argv, stdin);
    } catch (err) {
      warn(`cleanup: ${argv.join(" ")}`, err);
    }
  };
  // kube-proxy's IPVS cleanup flushes the whole table too: IPVS mode owns it.
  await attempt(["ipvsadm", "-C"]);
  for (const f of FAMILIES) {
    if (!families.has(f)) continue;
    for (const j of baseJumps) await attempt(jumpArgv(f, "-D", j));
    let restore = "";
    for (const table of ["nat", "filter"] as const) {
      const own = table === "nat" ? [chains.services, chains.postrouting, chains.markMasq] : [chains.filter, chains.forward];
      restore += `*${table}\n${own.map((c) => `:${c} - [0:0]\n`).join("")}${own.map((c) => `-X ${c}\n`).join("")}COMMIT\n`;
    }
    await attempt(restoreArgv(f), restore);
    // Sets go after the rules that reference them.
    for (const id of setIds) await attempt(["ipset", "destroy", setName(id, f)]);
  }
  await attempt(["ip", "link", "del", dummyInterface]);
}
