// The IPVS backend (full-state model). Each apply renders the changed
// services, plans against the kernel picture and runs at most one command per
// tool. A full sync (first apply, `change === null`, or after any failure)
// re-reads the kernel, so it also converges after a restart or an operator's
// edit; partial syncs trust the picture that the last successful sync left.

import {
  type BackendContext,
  type Config,
  type Drift,
  errorMessage,
  type Executor,
  FAMILIES,
  familiesOf,
  type Family,
  type FullStateBackend,
  invalid,
  ipVersion,
  KpngError,
  narrowDrift,
  type Logger,
  needsInterfaceAddresses,
  nodeIPsOf,
  nodePortIPs,
  parseIpAddrJson,
  type NodeState,
  sameIPs,
  type StateChange,
} from "../../src/host/toolkit/index.ts";
import { baseJumps, chains, dummyInterface, setIds, setName } from "./names.ts";
import { excludedAddresses, sysctlArgv, timeoutsArgv } from "./settings.ts";
import { type KernelModel, type Transaction, emptyKernel, operationCount, vsKey } from "./model.ts";
import { type RenderContext, renderService } from "./render-service.ts";
import { DesiredState, commit, drainingServices, noneTouched, ownedVirtualServers, planChanges, planDrain } from "./plan.ts";
import { printAddresses, printIpset, printIpvsadm, printSetCreates, serviceFlag } from "./print.ts";
import { iptablesRules, jumpArgv, printIptablesRestore, restoreArgv } from "./render-iptables.ts";
import { parseIpvsConnections, parseKernel } from "./parse.ts";
import { compareIpvs } from "./verify.ts";

/** Upstream kube-proxy's start-up warning for IPVS mode (cmd/kube-proxy/app/server_linux.go, KEP-5495). */
export const IPVS_DEPRECATION_MESSAGE =
  "The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead.";
/** Reason of the Node Warning event upstream records with that message. */
export const IPVS_DEPRECATION_REASON = "IPVSDeprecation";

/** Schedulers the kernel ships (ipvsadm(8)); anything else fails at every sync, so refuse it up front. */
export const ipvsSchedulers = ["rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"];

export interface IpvsOptions {
  executor: Executor;
  /** how often draining real servers are checked; 0 = only through drain() (upstream: one minute) */
  drainIntervalMs?: number;
}

export interface SyncStats {
  full: boolean;
  operations: number;
  commands: number;
}

export class IpvsBackend implements FullStateBackend {
  readonly name = "ipvs";
  readonly kind = "full";
  readonly nodeWarning = { reason: IPVS_DEPRECATION_REASON, note: IPVS_DEPRECATION_MESSAGE };
  /** figures of the last apply, for logs, tests and benchmarks */
  readonly last: SyncStats = { full: false, operations: 0, commands: 0 };

  private readonly config: Config;
  private readonly log: Logger;
  private readonly exec: Executor;
  private readonly families: ReadonlySet<Family>;
  private readonly ourSets: ReadonlySet<string>;
  private readonly renderCtx: RenderContext;
  /** ipvs.excludeCIDRs: virtual servers on these addresses are never deleted as stale */
  private readonly excluded: (ip: string) => boolean;
  /** what renderCtx.nodePortIPs was computed from: the node's IPs, this host's addresses */
  private nodeIPs: readonly string[];
  private interfaceAddrs: string[] = [];
  private desired = new DesiredState();
  private kernel: KernelModel = emptyKernel();
  // Until a sync succeeds the kernel picture cannot be trusted: the next sync re-reads it.
  private needFull = true;
  private timer: ReturnType<typeof setInterval> | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private commands = 0;
  /** a sync succeeded (not a dry run): `desired` is what the kernel was given */
  private programmed = false;

  constructor(
    private readonly ctx: BackendContext,
    private readonly opts: IpvsOptions,
  ) {
    this.config = ctx.config;
    this.log = ctx.log;
    this.exec = opts.executor;
    const scheduler = this.config.ipvs.scheduler || "rr";
    if (!ipvsSchedulers.includes(scheduler)) {
      throw invalid(`config ipvs.scheduler: "${scheduler}" is not an IPVS scheduler (one of ${ipvsSchedulers.join(", ")})`);
    }
    this.families = familiesOf(this.config);
    this.ourSets = new Set([...this.families].flatMap((f) => setIds.map((id) => setName(id, f))));
    this.renderCtx = { scheduler, families: this.families, nodePortIPs: nodePortIPs(this.config) };
    this.nodeIPs = this.config.nodeIPs;
    this.excluded = excludedAddresses(this.config.ipvs.excludeCIDRs);
  }

  async setup(): Promise<void> {
    const { config } = this;
    this.log.warn(IPVS_DEPRECATION_MESSAGE, { reason: IPVS_DEPRECATION_REASON });
    // Probe first: on a kernel without IPVS this is the one clear error the operator sees.
    if (!config.dryRun) await this.run(["ipvsadm", "-Ln", "--timeout"]);
    await this.run(sysctlArgv(config));
    const timeouts = timeoutsArgv(config);
    // Upstream logs a failure here and goes on: the timeouts are a tuning, not a need.
    if (timeouts)
      await this.run(timeouts).catch((err: unknown) => this.log.error("Failed to configure IPVS timeouts", { error: errorMessage(err) }));
    if (config.dryRun) await this.run(["ip", "link", "add", dummyInterface, "type", "dummy"]);
    else {
      try {
        await this.run(["ip", "link", "show", dummyInterface]);
      } catch {
        await this.run(["ip", "link", "add", dummyInterface, "type", "dummy"]);
      }
    }
    if (needsInterfaceAddresses(config) && !config.dryRun) {
      this.interfaceAddrs = parseIpAddrJson(await this.run(["ip", "-j", "addr", "show"]), { exclude: dummyInterface });
      this.renderCtx.nodePortIPs = nodePortIPs({ ...config, nodeIPs: [...this.nodeIPs] }, this.interfaceAddrs);
    }
    const every = this.opts.drainIntervalMs ?? 60_000;
    if (!config.dryRun && every > 0) {
      this.timer = setInterval(() => {
        this.serialize(() => this.drainNow()).catch((err: unknown) =>
          this.log.warn("draining real servers failed", { error: errorMessage(err) }),
        );
      }, every);
      this.timer.unref?.();
    }
  }

  apply(state: NodeState, change: StateChange): Promise<void> {
    return this.serialize(() => this.sync(state, change));
  }

  /**
   * `kpng verify`: the kernel read back as a full sync reads it (three reads)
   * and compared with what the last sync programmed (verify.ts), between
   * syncs and drains. The check of every Service sets the backend's drift metric.
   */
  verify(service?: string): Promise<Drift[]> {
    return this.serialize(async () => {
      if (!this.programmed) throw new KpngError("failed_precondition", "ipvs: nothing programmed yet (no sync applied, or --dry-run)");
      const drifts = compareIpvs(this.desired, await this.readKernel());
      if (service === undefined) this.ctx.metrics?.rulesDrift(this.name, drifts.length);
      return narrowDrift(drifts, service);
    });
  }

  /** Deletes draining real servers whose connections are over; returns how many. */
  drain(): Promise<number> {
    return this.serialize(() => this.drainNow());
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.queue;
  }

  async cleanup(): Promise<void> {
    await this.serialize(() => cleanupAll(this.exec, this.families, (msg, err) => this.log.warn(msg, { error: errorMessage(err) })));
    this.needFull = true;
    this.programmed = false;
  }

  private run(argv: string[], stdin?: string) {
    this.commands++;
    return this.exec.run(argv, stdin);
  }

  /** One sync or drain at a time: the drain timer must not interleave with an apply. */
  private serialize<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.queue.then(fn);
    this.queue = p.catch(() => undefined);
    return p;
  }

  private async readKernel(): Promise<KernelModel> {
    const ipvsSave = await this.run(["ipvsadm", "-Sn"]);
    const ipsetSave = await this.run(["ipset", "save"]);
    const dummyAddrs = await this.run(["ip", "-j", "addr", "show", "dev", dummyInterface]);
    return parseKernel({ ipvsSave, ipsetSave, dummyAddrs, ourSets: this.ourSets });
  }

  private async ensureJumps(family: Family) {
    for (const j of baseJumps) {
      if (this.config.dryRun) {
        await this.run(jumpArgv(family, "-I", j));
        continue;
      }
      try {
        await this.run(jumpArgv(family, "-C", j));
      } catch {
        await this.run(jumpArgv(family, "-I", j));
      }
    }
  }

  private async execute(tx: Transaction, full: boolean) {
    if (full) {
      // Sets first: the iptables rules reference them.
      await this.run(["ipset", "restore"], printSetCreates(this.families) + printIpset(tx.sets));
      for (const f of this.families) {
        await this.run(restoreArgv(f), printIptablesRestore(iptablesRules(f, this.config))).catch((err) => {
          this.ctx.metrics?.transactionFailed("ipvs", ipVersion(f), false);
          throw err;
        });
        await this.ensureJumps(f);
      }
    } else if (tx.sets.length) {
      await this.run(["ipset", "restore"], printIpset(tx.sets));
    }
    if (tx.ipvs.length) await this.run(["ipvsadm", "-R"], printIpvsadm(tx.ipvs));
    if (tx.addresses.length) await this.run(["ip", "-batch", "-"], printAddresses(tx.addresses));
  }

  private async sync(state: NodeState, change: StateChange) {
    const { config, renderCtx } = this;
    const ips = nodeIPsOf(state, config);
    if (!sameIPs(ips, this.nodeIPs)) {
      // Node ports answer on the node's IPs: every node-port virtual server moves (a full sync).
      this.nodeIPs = ips;
      renderCtx.nodePortIPs = nodePortIPs({ ...config, nodeIPs: [...ips] }, this.interfaceAddrs);
      this.needFull = true;
    }
    const full = change === null || this.needFull;
    this.needFull = true;
    this.programmed = false;
    this.commands = 0;
    const touched = noneTouched();
    if (full) {
      this.desired = new DesiredState();
      for (const [key, se] of state.services) this.desired.set(key, renderService(se, renderCtx), touched);
      this.kernel = config.dryRun ? emptyKernel() : await this.readKernel();
      // Foreign virtual servers leave kpng's picture of the kernel: no sync or drain touches them
      // (one kpng wants itself stays, so that it is edited rather than added twice).
      // Those in ipvs.excludeCIDRs are left alone as foreign ones are, unless a service wants them.
      const owned = new Set(ownedVirtualServers(this.kernel).filter((k) => !this.excluded(this.kernel.virtualServices.get(k)!.vs.ip)));
      for (const k of this.kernel.virtualServices.keys())
        if (!owned.has(k) && !this.desired.virtualService(k)) this.kernel.virtualServices.delete(k);
      for (const k of owned) touched.vs.add(k);
      for (const a of this.kernel.addresses) touched.addresses.add(a);
      for (const e of this.kernel.entries) touched.entries.add(e);
    } else {
      for (const key of change) {
        const se = state.services.get(key);
        this.desired.set(key, se && renderService(se, renderCtx), touched);
      }
    }
    const conflicts = this.desired.conflicts(touched.vs);
    if (conflicts.length) this.log.warn("several services claim one virtual server; the first by name wins", { virtualServers: conflicts });
    const tx = planChanges(this.desired, this.kernel, touched, (vs) => this.excluded(vs.ip));
    await this.execute(tx, full);
    commit(this.kernel, tx);
    this.needFull = false;
    this.programmed = !config.dryRun;
    Object.assign(this.last, { full, operations: operationCount(tx), commands: this.commands });
    this.log.debug("synced", { rev: state.rev, ...this.last });
  }

  private async drainNow(): Promise<number> {
    if (this.config.dryRun) return 0;
    const draining = drainingServices(this.kernel);
    if (!draining.length) return 0;
    const connections = new Map<string, Map<string, number>>();
    for (const v of draining) {
      try {
        const text = await this.exec.run(["ipvsadm", "-Ln", "--exact", ...serviceFlag(v.vs).split(" ")]);
        connections.set(vsKey(v.vs), parseIpvsConnections(text));
      } catch (err) {
        this.log.debug("cannot read connections; will retry", { virtualServer: vsKey(v.vs), error: errorMessage(err) });
      }
    }
    const tx = planDrain(draining, connections);
    if (!tx.ipvs.length) return 0;
    await this.exec.run(["ipvsadm", "-R"], printIpvsadm(tx.ipvs));
    commit(this.kernel, tx);
    return tx.ipvs.length;
  }
}

export const createIpvsBackend = (ctx: BackendContext, opts: IpvsOptions) => new IpvsBackend(ctx, opts);

/** `--cleanup`: everything IPVS mode created, best effort (a piece already gone is fine). */
async function cleanupAll(exec: Executor, families: ReadonlySet<Family>, warn: (msg: string, err: unknown) => void) {
  const attempt = async (argv: string[], stdin?: string) => {
    try {
      await exec.run(argv, stdin);
    } catch (err) {
      warn(`cleanup: ${argv.join(" ")}`, err);
    }
  };
  // Only kpng's virtual servers go (ownedVirtualServers); kube-proxy's IPVS cleanup flushes the whole
  // table, other software's virtual servers (keepalived's) too, which kpng does not.
  try {
    const kernel = parseKernel({
      ipvsSave: await exec.run(["ipvsadm", "-Sn"]),
      ipsetSave: await exec.run(["ipset", "save"]),
      dummyAddrs: await exec.run(["ip", "-j", "addr", "show", "dev", dummyInterface]).catch(() => "[]"),
      ourSets: new Set(FAMILIES.flatMap((f) => setIds.map((id) => setName(id, f)))),
    });
    const owned = ownedVirtualServers(kernel).map((k) => `-D ${serviceFlag(kernel.virtualServices.get(k)!.vs)}\n`);
    if (owned.length) await attempt(["ipvsadm", "-R"], owned.join(""));
  } catch (err) {
    warn("cleanup: reading IPVS", err);
  }
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
  // the device only if it is the dummy kpng makes: another device of that name is not kpng's
  const link = await exec.run(["ip", "-j", "-d", "link", "show", dummyInterface]).catch(() => "");
  if (/"info_kind":"dummy"/.test(link)) await attempt(["ip", "link", "del", dummyInterface]);
}
