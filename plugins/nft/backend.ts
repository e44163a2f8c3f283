// The nftables backend: a full-state backend that renders only what changed
// (plan.ts), applies it as one atomic transaction (executor.ts: `nft -f -`,
// or a running `nft -i` for small partial syncs, session.ts) and then clears
// stale UDP conntrack entries (src/host/toolkit/conntrack.ts). Between syncs the
// watch (watch.ts) reads the kernel's ruleset events (netlink-socket.ts; `nft
// monitor` where that socket cannot be opened) for other processes changing
// kpng's tables; the feed answers such a report with a full sync.
//
// `createNftBackend(ctx, { exec, interactive, monitor })` lets tests run it against a
// recorder or inside a network namespace; index.ts is the entry the registry
// loads for `--backend nft`.

import {
  type BackendContext,
  conntrackArgv,
  type Drift,
  errorMessage,
  KpngError,
  narrowDrift,
  type Executor,
  frontendKey,
  type FullStateBackend,
  type Logger,
  nodeIPsOf,
  type NodeState,
  reconcileConntrack,
  sameIPs,
  type StaleFlow,
  staleUdpFlows,
  type StateChange,
  type UdpFrontend,
} from "../../src/host/toolkit/index.ts";
import { loopbackEntries } from "./addr.ts";
import { type AheadLoad, NftRunner, processExecutor, processSpawner } from "./executor.ts";
import { NftSession, type Spawner } from "./session.ts";
import { NftSync, cleanupTransaction, type SyncPlan } from "./plan.ts";
import { listHoldings, type Holdings } from "./rewrite-in-place.ts";
import { netlinkEvents, openBatchSocket } from "./netlink-socket.ts";
import { RulesWatch, firstWorking, monitorEvents } from "./watch.ts";
import { FAMILIES } from "./names.ts";
import { compareTable, type KernelTable, normalizeKey, readTable, readTableNetlink } from "./verify.ts";
import type { ProgrammedTable } from "./programmed.ts";
import type { BatchSocket } from "./netlink-socket.ts";

export interface NftOptions {
  /** where `nft` and `conntrack` run (default: real processes) */
  exec?: Executor;
  /** where the `nft -i` for small partial syncs runs (default: a real process when `exec` is not given, else none) */
  interactive?: Spawner;
  /** where the `nft monitor` that sees other processes' changes runs when kpng cannot read the kernel's events itself (watch.ts; default: a real process when `exec` is not given, else none: no watch) */
  monitor?: Spawner;
  /** how the watch hears of changes: the kernel's netlink events, read by kpng (default; `nft monitor` where the socket cannot be opened), or `nft monitor` only */
  events?: "netlink" | "monitor";
  /** the network namespace (a name under /run/netns) kpng's tables are in, when not this process's: tests and benchmarks run the backend in-process with `nft` in a namespace */
  netns?: string;
  /** how a first load into empty tables sends its set and map elements: encoded by kpng on its own netlink socket (the default where kpng's tables are this process's, or `netns` is given; `nft -f` where the socket cannot be opened), or through `nft -f` only */
  firstLoad?: "netlink" | "nft";
}

export interface SyncStats {
  full: boolean;
  statements: number;
  /** waiting, once the services are rendered, for the listing of what the tables hold (a full sync's; rewrite-in-place.ts) */
  listMs: number;
  renderMs: number;
  applyMs: number;
  conntrackDeletes: number;
}

export class NftBackend implements FullStateBackend {
  readonly name = "nft";
  readonly kind = "full";
  /** figures of the last apply, for logs and benchmarks */
  last: SyncStats | undefined;

  private sync: NftSync;
  /** the node IPs `sync` renders with ("primary" node-port addresses) */
  private nodeIPs: readonly string[];
  private readonly runner: NftRunner;
  private readonly exec: Executor;
  private readonly log: Logger;
  private needFull = true;
  /** where to say that someone else changed the tables (the feed answers with a full sync) */
  private report: ((reason: string) => void) | undefined;
  private readonly watch: RulesWatch | undefined;
  /** UDP frontends as last applied, per service: what conntrack cleanup diffs against */
  private udpApplied = new Map<string, UdpFrontend[]>();
  /** the apply under way (settled, never rejects): `verify` reads the kernel between applies, not in one */
  private applying: Promise<unknown> = Promise.resolve();
  /** an apply succeeded: the records say what the kernel holds */
  private programmed = false;
  /** where `verify` dumps kpng's tables (netlink-dump.ts); absent: `nft -j list table` */
  private readonly dumpSocket: (() => BatchSocket) | undefined;

  constructor(
    private readonly ctx: BackendContext,
    opts: NftOptions = {},
  ) {
    this.exec = opts.exec ?? processExecutor();
    this.log = ctx.log.child("nft");
    const spawner = opts.interactive ?? (opts.exec ? undefined : processSpawner());
    const monitor = ctx.config.dryRun ? undefined : (opts.monitor ?? (opts.exec ? undefined : spawner));
    if (monitor) {
      const fallback = monitorEvents(monitor);
      const source = opts.events === "monitor" ? fallback : firstWorking(netlinkEvents({ netns: opts.netns }), fallback, this.log);
      this.watch = new RulesWatch({ source, log: this.log, onForeign: (what) => this.rulesChanged(what) });
    }
    // with another executor and no namespace named, the tables are not this process's: no socket of its own
    const ownSocket = opts.firstLoad !== "nft" && !ctx.config.dryRun && (!opts.exec || opts.netns !== undefined);
    const batchSocket = ownSocket ? () => openBatchSocket(opts.netns) : undefined;
    this.runner = new NftRunner(this.exec, spawner && new NftSession(spawner), this.log, this.watch, batchSocket);
    if (!ctx.config.dryRun && (!opts.exec || opts.netns !== undefined)) this.dumpSocket = () => openBatchSocket(opts.netns);
    this.nodeIPs = ctx.config.nodeIPs;
    this.sync = new NftSync(ctx.config);
  }

  async setup(): Promise<void> {
    // Upstream's nftables mode serves no node port on loopback, whatever
    // iptables.localhostNodePorts says (an iptables-mode setting), and logs
    // this for each loopback address nodePortAddresses names.
    for (const address of loopbackEntries(this.ctx.config.nodePortAddresses))
      this.log.error("--nodeport-addresses includes localhost but localhost NodePorts are not supported", { address });
    if (this.ctx.config.dryRun) return;
    // Validates the whole skeleton in the kernel (fib, numgen, maps) without committing it.
    await this.runner.check(this.sync.emptyFullSync());
  }

  async apply(state: NodeState, change: StateChange): Promise<void> {
    const run = this.applyNow(state, change);
    this.applying = run.catch(() => undefined);
    // a failed apply forgets the records (sync.reset): nothing to compare until one succeeds
    this.programmed = false;
    await run;
    this.programmed = !this.ctx.config.dryRun;
  }

  /**
   * `kpng verify`: both tables read back (a netlink dump on kpng's own
   * socket, else one `nft -j list table` each) and compared with what the
   * last apply programmed (verify.ts). The check of every Service sets the
   * backend's drift metric.
   */
  async verify(service?: string): Promise<Drift[]> {
    await this.applying;
    if (!this.programmed) throw new KpngError("failed_precondition", "nft: nothing programmed yet (no sync applied, or --dry-run)");
    // taken before the read: an apply that starts meanwhile changes the records, not this
    const want = this.sync.programmed(normalizeKey);
    const got = await this.readTables(want);
    const drifts = want.flatMap((t, i) => compareTable(t, got[i]));
    if (service === undefined) this.ctx.metrics?.rulesDrift(this.name, drifts.length);
    return narrowDrift(drifts, service);
  }

  /** both tables as the kernel holds them: on a netlink socket of kpng's own where it can open one, else through nft */
  private async readTables(want: ProgrammedTable[]): Promise<KernelTable[]> {
    let socket: BatchSocket | undefined;
    try {
      socket = this.dumpSocket?.();
    } catch (err) {
      this.log.debug("verify: no netlink socket, reading the tables with nft", { err: errorMessage(err) });
    }
    if (!socket) return Promise.all(FAMILIES.map((f) => readTable(this.exec, f)));
    try {
      const out: KernelTable[] = [];
      for (const t of want) out.push(await readTableNetlink(socket, this.exec, t));
      return out;
    } finally {
      socket.close();
    }
  }

  private async applyNow(state: NodeState, change: StateChange): Promise<void> {
    const ips = nodeIPsOf(state, this.ctx.config);
    if (!sameIPs(ips, this.nodeIPs)) {
      // The nodeport-ips set and the rules guarding node ports are base objects: a full sync rewrites them.
      this.nodeIPs = ips;
      this.sync = new NftSync({ ...this.ctx.config, nodeIPs: [...ips] });
      this.needFull = true;
    }
    const full = this.needFull || change === null;
    // Into tables that do not exist, a full sync's base loads while the services render here (a first
    // load, executor.ts); else it lists what the tables hold (another process) meanwhile.
    const ahead = full && !this.ctx.config.dryRun ? await this.runner.startFirstLoad(() => this.sync.firstLoadBase()) : undefined;
    const listing = full && !ahead ? this.held() : undefined;
    const t0 = performance.now();
    const rendered = this.sync.render(state, full ? null : change);
    const t1 = performance.now();
    const held = ahead ? NOTHING_HELD : await listing;
    const t2 = performance.now();
    let plan = this.sync.finish(rendered, held);
    // part of rendering, kept by the transaction; a first load whose elements kpng encodes prints only the rest (executor.ts)
    if (!(plan.full && plan.fresh && this.runner.encodesFirstLoads)) plan.tx.print();
    const renderMs = t1 - t0 + (performance.now() - t2);
    const listMs = t2 - t1;
    if (plan.truncated) this.log.warn("endpoints beyond the per-service limit left out", { count: plan.truncated });
    if (this.ctx.config.dryRun) {
      const flows = this.staleFlows(plan);
      const notes = flows.map((f) => `# ${conntrackArgv(f).join(" ")}\n`).join("");
      if (!plan.tx.empty) this.ctx.out(plan.tx.print() + notes);
      this.needFull = false;
      this.commit(plan, { renderMs, applyMs: 0, listMs: 0, conntrackDeletes: 0 });
      return;
    }
    const t3 = performance.now();
    try {
      await this.transaction(plan, ahead);
    } catch (err) {
      // The kernel refused the batch (nothing of it was applied), or the
      // `nft -i` running it died (applied or not), and our records may not
      // match the kernel (someone flushed a chain, a previous sync
      // half-known): only a full resync is safe.
      this.sync.reset();
      this.needFull = true;
      if (plan.full) throw err;
      this.log.warn("partial sync failed, resyncing everything", { err: errorMessage(err) });
      plan = this.sync.plan(state, null, await this.held());
      await this.transaction(plan);
    }
    this.needFull = false;
    const applyMs = performance.now() - t3;
    const deletes = await this.clearConntrack(plan);
    this.commit(plan, { renderMs, applyMs, listMs, conntrackDeletes: deletes });
  }

  /**
   * What kpng's tables hold, for a full sync that keeps the affinity sets
   * (rewrite-in-place.ts); undefined in dry-run (nothing is read from the kernel) or when
   * the listing fails: that full sync replaces the tables whole.
   */
  private async held(): Promise<Holdings | undefined> {
    if (this.ctx.config.dryRun) return undefined;
    try {
      return await listHoldings(this.exec);
    } catch (err) {
      this.log.warn("cannot list kpng's tables: the full sync re-creates them (ClientIP affinity starts over)", { err: errorMessage(err) });
      return undefined;
    }
  }

  /** resolves once the monitor restarted after a full sync listens (or gave up): tests and benchmarks */
  async watching(): Promise<void> {
    await this.runner.settled();
  }

  /** The feed's ear: someone else changed kpng's tables. */
  watchRules(report: (reason: string) => void): void {
    this.report = report;
  }

  async cleanup(): Promise<void> {
    const tx = cleanupTransaction();
    this.watch?.stop(); // removing the tables is no change to repair
    if (this.ctx.config.dryRun) this.ctx.out(tx.print());
    else await this.runner.apply(tx, { full: true, unstamped: true });
    this.sync.reset();
    this.needFull = true;
    this.programmed = false;
    this.udpApplied.clear();
  }

  /** ends the `nft -i` session; the rules stay */
  async close(): Promise<void> {
    this.runner.close();
  }

  private rulesChanged(what: string) {
    // Whatever was changed, the records of what the kernel holds are wrong now.
    this.needFull = true;
    this.log.debug("kpng's tables were changed by another process: the next sync is full", { change: what });
    this.report?.(what);
  }

  private staleFlows(plan: SyncPlan): StaleFlow[] {
    const prev = new Map<string, UdpFrontend>();
    const next = new Map<string, UdpFrontend>();
    const before = plan.full ? [...this.udpApplied.keys()] : plan.keys;
    for (const k of before) for (const u of this.udpApplied.get(k) ?? []) prev.set(frontendKey(u), u);
    for (const list of plan.udp.values()) for (const u of list) next.set(frontendKey(u), u);
    return staleUdpFlows(prev, next);
  }

  /** One transaction, both families' tables: a refusal counts for both (kube-proxy's nftables_sync_failures_total). */
  private async transaction(plan: SyncPlan, ahead?: AheadLoad): Promise<void> {
    try {
      await this.runner.apply(plan.tx, { full: plan.full, fresh: plan.fresh, ahead });
    } catch (err) {
      for (const family of [4, 6] as const) this.ctx.metrics?.transactionFailed(this.name, family, !plan.full);
      throw err;
    }
  }

  private async clearConntrack(plan: SyncPlan): Promise<number> {
    const flows = this.staleFlows(plan);
    await reconcileConntrack(this.exec, flows, this.log, (f, secs, n) => this.ctx.metrics?.conntrackReconciled(f, secs, n));
    return flows.length;
  }

  private commit(plan: SyncPlan, times: Omit<SyncStats, "full" | "statements">) {
    if (plan.full) this.udpApplied.clear();
    for (const k of plan.keys) {
      const u = plan.udp.get(k);
      if (u) this.udpApplied.set(k, u);
      else this.udpApplied.delete(k);
    }
    this.last = { full: plan.full, statements: plan.tx.statements, ...times };
    this.log.debug("synced", { ...this.last });
  }
}

/** what tables that do not exist hold */
const NOTHING_HELD: Holdings = { ip: { chains: new Map(), sets: new Map() }, ip6: { chains: new Map(), sets: new Map() } };

export const createNftBackend = (ctx: BackendContext, opts: NftOptions = {}) => new NftBackend(ctx, opts);
