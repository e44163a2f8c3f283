// The iptables backend: incremental calls -> ChangeTracker -> renderer ->
// one `iptables-restore --noflush` (and ip6tables-restore) per sync.
//
// Partial sync, and when it is not enough:
// - the first sync, the one after any failed restore (we cannot know what
//   the kernel holds then), and one every `fullSyncPeriodMs` are full: every
//   kpng chain rewritten, leftovers deleted, built-in jumps checked;
// - the monitor looks for the canary chains every CANARY_PERIOD_MS: if
//   someone flushed the tables, the canaries are gone and a full restore
//   follows (through the feed when it listens: Backend.watchRules);
// - every other sync rewrites only the chains of services that changed, and
//   within them only the chains whose rules differ.

import {
  type BackendContext,
  type Config,
  allDone,
  type Drift,
  narrowDrift,
  type Endpoint,
  errorMessage,
  type Executor,
  FAMILIES,
  type Family,
  type IncrementalBackend,
  ipVersion,
  KpngError,
  type Logger,
  reconcileConntrack,
  sameIPs,
  type Service,
  type StaleFlow,
  staleUdpFlows,
  type UdpFrontend,
} from "../../src/host/toolkit/index.ts";
import { iptablesExecutor, spawnExecutor, type IptablesExecutor } from "./executor.ts";
import { baseJumps, chains, fixedChains, hairpinSets, ipsetCommand, restoreCommand, tables } from "./names.ts";
import { HairpinMembers, ipsetCreate, ipsetEdits, ipsetFull, StreamedFill } from "./render-ipset.ts";
import { udpFrontends } from "./render-conntrack.ts";
import { localhostNodePorts, loopbackRefusals, renderFixed } from "./render-fixed.ts";
import { heldAtFirstCommit, printRestore, streamRestore, Transaction } from "./render-restore.ts";
import { renderService, type ServiceRules } from "./render-service.ts";
import { compact, fullTransaction, fullTransactionSteps, partialTransaction, type ServiceChange, type WrittenService } from "./plan.ts";
import { parseSave, type SavedState } from "./parse-save.ts";
import { ChangeTracker } from "./tracker.ts";
import { compareRules, type ProgrammedRules, savedMembers, savedRules } from "./verify.ts";

export interface IptablesOptions {
  /** runs the iptables programs (default: on this host) */
  executor?: Executor;
  /** address families to program (default both) */
  families?: Family[];
  /** a full restore at least this often (upstream kube-proxy: 1 hour) */
  fullSyncPeriodMs?: number;
  /** how often the monitor checks the canaries; 0 = no timer (default: CANARY_PERIOD_MS, or syncPeriod if shorter) */
  monitorPeriodMs?: number;
  now?: () => number;
  /** hairpin by ipset (true) or a SEP chain per endpoint (false); default: ipset if setup can create the sets */
  hairpinSet?: boolean;
}

/** What the last sync did, for logs, tests and the benchmark. */
export interface SyncStats {
  full: boolean;
  /** restore input size per family (0 = nothing to run) */
  bytes: Partial<Record<Family, number>>;
  /** services rendered */
  rendered: number;
  /** building the restore inputs (JS) */
  renderMs: number;
  /** the rest of the sync's wall time: reading the rules back (full syncs), iptables-restore and ipset */
  applyMs: number;
  ms: number;
}

const hour = 3_600_000;

/**
 * Upstream checks its canary once per sync period (30 s). A check is one
 * `iptables -S` per table and family, whatever the ruleset's size, so one
 * every 5 s costs little CPU (see docs/results/2026-11.md) and repairs a flush
 * within 5 s, as the nft backend does.
 */
export const CANARY_PERIOD_MS = 5000;

/** Upstream's largeClusterEndpointsThreshold: past this many endpoints, per-endpoint rules lose their comments. */
export const largeClusterEndpoints = 1000;

export class IptablesBackend implements IncrementalBackend {
  readonly kind = "incremental";
  readonly name = "iptables";
  private readonly tracker = new ChangeTracker();
  private readonly ipt: IptablesExecutor;
  private readonly exec: Executor;
  private families: Family[];
  private readonly log: Logger;
  private readonly written = { v4: new Map<string, WrittenService>(), v6: new Map<string, WrittenService>() };
  /** rules kpng owns per table, per family (metrics) */
  private readonly ruleTotals = { v4: new Map(tables.map((t) => [t, 0])), v6: new Map(tables.map((t) => [t, 0])) };
  private readonly udp = { v4: new Map<string, Map<string, UdpFrontend>>(), v6: new Map<string, Map<string, UdpFrontend>>() };
  private hairpin = { v4: new HairpinMembers(), v6: new HairpinMembers() };
  private hairpinSet: boolean;
  /** setup created the hairpin sets and no sync ran since: the first one need not create them again */
  private setsFresh = false;
  private needFull = true;
  private lastFull = -Infinity;
  private synced = false;
  /** a sync succeeded (not a dry run): `written` says what the kernel holds */
  private restored = false;
  private queue: Promise<void> = Promise.resolve();
  /** the hairpin deletions still running after the last sync (deferIpset) */
  private lagging: Promise<void> | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  /** Config with the node's current IPs ("primary" node ports, the LB source-range exception) */
  private config: Config;
  /** where to say the canaries are gone (the feed answers with a full sync); unset: the monitor syncs itself */
  private report: ((reason: string) => void) | undefined;
  lastSync: SyncStats | undefined;

  constructor(
    private readonly ctx: BackendContext,
    private readonly opts: IptablesOptions = {},
  ) {
    this.exec = opts.executor ?? spawnExecutor();
    this.ipt = iptablesExecutor(this.exec);
    this.families = opts.families ?? [...FAMILIES];
    this.log = ctx.log.child("iptables");
    this.config = ctx.config;
    this.hairpinSet = opts.hairpinSet ?? true;
  }

  setNodeIPs(ips: readonly string[]) {
    if (sameIPs(ips, this.config.nodeIPs)) return;
    this.config = { ...this.ctx.config, nodeIPs: [...ips] };
    this.needFull = true; // rules that name the node's IPs may be in any chain
  }

  private now = () => (this.opts.now ?? Date.now)();

  setService(service: Service) {
    this.tracker.setService(service);
  }
  deleteService(namespace: string, name: string) {
    this.tracker.deleteService(namespace, name);
  }
  setEndpoint(namespace: string, serviceName: string, key: string, endpoint: Endpoint) {
    this.tracker.setEndpoint(namespace, serviceName, key, endpoint);
  }
  deleteEndpoint(namespace: string, serviceName: string, key: string) {
    this.tracker.deleteEndpoint(namespace, serviceName, key);
  }

  async setup() {
    for (const refusal of loopbackRefusals(this.ctx.config)) this.log.error(refusal);
    if (this.ctx.config.dryRun) return;
    // Start-up is on the way to the first sync: the families' checks run at once.
    const checks = await Promise.allSettled(this.families.map((family) => this.exec.run([restoreCommand(family), "--version"])));
    for (const [i, family] of [...this.families].entries()) {
      const check = checks[i];
      if (check.status === "fulfilled") continue;
      if (family === "v4")
        throw new KpngError("unavailable", `iptables backend: ${restoreCommand(family)} does not run: ${errorMessage(check.reason)}`);
      this.log.warn("IPv6 disabled: ip6tables-restore does not run", { error: errorMessage(check.reason) });
      this.families = this.families.filter((f) => f !== family);
    }
    if (this.families.includes("v4") && localhostNodePorts(this.ctx.config)) await this.allowLocalnetRouting();
    if (this.opts.hairpinSet === undefined) {
      // Creating the sets proves the program and the kernel's ip_set modules both work.
      try {
        await this.ipt.ipset(this.families.map(ipsetCreate).join(""));
        this.setsFresh = true;
      } catch (err) {
        this.hairpinSet = false;
        this.log.warn("ipset does not work here: every endpoint gets its own SEP chain (upstream's layout; slower restores at scale)", {
          error: errorMessage(err),
        });
      }
    }
    const period = this.opts.monitorPeriodMs ?? Math.min(CANARY_PERIOD_MS, this.ctx.config.syncPeriodSeconds * 1000);
    if (period > 0) {
      this.timer = setInterval(() => void this.monitor(), period);
      this.timer.unref?.();
    }
  }

  /**
   * route_localnet=1 lets the kernel route a DNATed packet whose source or
   * destination is 127.0.0.0/8 (a node port reached on 127.0.0.1); upstream's
   * iptables proxier sets it at start-up for the same setting, and fails
   * without it. Per network namespace; never reset (upstream neither).
   */
  private async allowLocalnetRouting() {
    this.log.info(
      "Setting route_localnet=1 to allow node-ports on localhost; to change this either disable iptables.localhostNodePorts (--iptables-localhost-nodeports) or set nodePortAddresses (--nodeport-addresses) to filter loopback addresses",
    );
    try {
      await this.exec.run(["sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"]);
    } catch (err) {
      throw new KpngError(
        "unavailable",
        `iptables backend: cannot set net.ipv4.conf.all.route_localnet=1, which iptables.localhostNodePorts needs: ${errorMessage(err)}`,
      );
    }
  }

  async close() {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.queue;
    await this.lagging;
  }

  watchRules(report: (reason: string) => void) {
    this.report = report;
  }

  /** One sync at a time: the monitor's syncs and the caller's must not interleave. */
  sync(): Promise<void> {
    const run = this.queue.then(() => this.doSync());
    this.queue = run.catch(() => {});
    return run;
  }

  /**
   * `kpng verify`: per family one `iptables-save` and one `ipset save` of the
   * hairpin set, compared with what the last restores wrote (verify.ts). In
   * the sync queue: never in the middle of a restore. The check of every
   * Service sets the backend's drift metric.
   */
  verify(service?: string): Promise<Drift[]> {
    const run = this.queue.then(() => this.check(service));
    this.queue = run.then(
      () => {},
      () => {},
    );
    return run;
  }

  private async check(service: string | undefined): Promise<Drift[]> {
    if (!this.restored) throw new KpngError("failed_precondition", "iptables: nothing programmed yet (no sync applied, or --dry-run)");
    await this.lagging;
    const read = async (family: Family) => {
      const want = this.programmed(family);
      const [save, set] = await Promise.all([
        this.ipt.save(family),
        // a set that does not exist fails the save: reported as missing
        want.hairpin ? this.exec.run([ipsetCommand, "save", want.hairpin.set]).catch(() => undefined) : undefined,
      ]);
      return compareRules(family, want, savedRules(save), set === undefined ? undefined : savedMembers(set));
    };
    const drifts = (await Promise.all(this.families.map(read))).flat();
    if (service === undefined) this.ctx.metrics?.rulesDrift(this.name, drifts.length);
    return narrowDrift(drifts, service);
  }

  /**
   * What the last restores wrote into one family: the fixed chains and jumps,
   * each Service's rules in the fixed chains and hairpin members as written,
   * and the rules of its own chains rendered again from the state they were
   * synced with (the sync keeps only digests of them). The chains of a
   * Service changed since are left out (ProgrammedRules.pending).
   */
  private programmed(family: Family): ProgrammedRules {
    const out: ProgrammedRules = { chains: new Map(), pending: new Set() };
    const chain = (table: string, name: string, owner: string) => {
      const k = `${table}/${name}`;
      let c = out.chains.get(k);
      if (!c) out.chains.set(k, (c = { owner, rules: [] }));
      return c;
    };
    const fixed = renderFixed(this.config, family, { hairpinSet: this.hairpinSet });
    for (const t of tables) for (const name of fixedChains[t]) chain(t, name, "");
    // the localnet guard's chain and jumps exist only while localhost node ports are on (render-fixed.ts)
    for (const c of fixed.chains) chain(c.table, c.name, "");
    for (const j of [...baseJumps, ...fixed.jumps])
      chain(j.table, j.from, "").rules.push({
        rule: { table: j.table, chain: j.from, comment: j.comment, match: j.match, target: ["-j", j.to] },
        owner: "",
      });
    for (const r of [...fixed.rules, ...fixed.tails]) chain(r.table, r.chain, "").rules.push({ rule: r, owner: "" });
    const members = new Map<string, string>();
    for (const [key, written] of this.written[family]) {
      // its rules in the fixed chains and its hairpin members are kept as written
      for (const rule of written.shared.values()) chain(rule.table, rule.chain, "").rules.push({ rule, owner: key });
      for (const m of written.hairpin) if (!members.has(m) || key < members.get(m)!) members.set(m, key);
      const rules = this.render(key, family);
      if (!rules || !sameChains(compact(rules), written)) {
        for (const k of written.chains.keys()) out.pending!.add(k);
        continue;
      }
      for (const c of rules.chains.values()) chain(c.table, c.name, key).rules.push(...c.rules.map((rule) => ({ rule, owner: key })));
    }
    if (this.hairpinSet) out.hairpin = { set: hairpinSets[family], members };
    return out;
  }

  /** Whether every canary chain is still there; if not, the next sync is full. */
  async checkCanaries(): Promise<boolean> {
    for (const family of this.families) {
      for (const table of tables) {
        if (await this.ipt.chainExists(family, table, chains.canary)) continue;
        this.log.warn("canary chain gone: someone flushed the tables; a full restore follows", { family, table });
        this.needFull = true;
        return false;
      }
    }
    return true;
  }

  /** Whether the next sync must be full: asked for (first sync, a failure, setNodeIPs), or the period is over. */
  private fullDue(): boolean {
    return this.needFull || this.now() - this.lastFull >= (this.opts.fullSyncPeriodMs ?? hour);
  }

  /** The periodic check: canaries, the full-restore period, the retry after a failure. */
  async monitor() {
    if (!this.synced) return; // nothing to restore before the brain's first sync
    try {
      if (!this.needFull && !(await this.checkCanaries()) && this.report) {
        this.report(`canary chain ${chains.canary} gone`);
        return;
      }
      if (this.fullDue()) await this.sync();
    } catch (err) {
      this.log.error("monitor sync failed", { error: errorMessage(err) });
    }
  }

  private async doSync() {
    this.synced = true;
    const t0 = performance.now();
    await this.lagging; // before fullDue(): a failed deletion makes this sync full
    const dirty = this.tracker.takeDirty();
    const full = this.fullDue();
    const stats: SyncStats = { full, bytes: {}, rendered: 0, renderMs: 0, applyMs: 0, ms: 0 };
    const stale: StaleFlow[] = [];
    try {
      // The families' tables are independent, so their syncs run side by side:
      // a first sync's big family no longer waits for the other's save,
      // restore and hairpin set to start its own restore (the kernel still
      // commits one batch at a time). A dry run prints them one after the other.
      if (this.ctx.config.dryRun) for (const family of this.families) await this.syncFamily(family, full, dirty, stats, stale);
      else await allDone(this.families.map((family) => this.syncFamily(family, full, dirty, stats, stale)));
      if (full) {
        this.needFull = false;
        this.lastFull = this.now();
      }
      this.restored = !this.ctx.config.dryRun;
      const round = (ms: number) => Math.round(ms);
      const ms = performance.now() - t0;
      this.log.debug("synced", {
        full,
        bytes: stats.bytes,
        services: stats.rendered,
        renderMs: round(stats.renderMs),
        applyMs: round(ms - stats.renderMs),
        ms: round(ms),
      });
    } catch (err) {
      // After a failed restore the kernel may hold anything: only a full restore is safe.
      this.needFull = true;
      throw err instanceof KpngError ? err : new KpngError("internal", `iptables sync failed: ${errorMessage(err)}`);
    } finally {
      this.setsFresh = false;
      stats.ms = performance.now() - t0;
      stats.applyMs = stats.ms - stats.renderMs;
      this.lastSync = stats;
    }
    if (!this.ctx.config.dryRun)
      await reconcileConntrack(this.exec, stale, this.log, (f, secs, n) => this.ctx.metrics?.conntrackReconciled(f, secs, n));
  }

  /** One family's sync: its rules read back (full syncs), its restore and hairpin set, what it now holds recorded. */
  private async syncFamily(family: Family, full: boolean, dirty: Set<string>, stats: SyncStats, stale: StaleFlow[]) {
    const keys = full ? new Set([...this.tracker.keys(), ...this.written[family].keys()]) : dirty;
    stats.rendered += keys.size;
    const next = new Map<string, WrittenService | undefined>();
    const saved = full && !this.ctx.config.dryRun ? parseSave(await this.ipt.save(family)) : undefined;
    const { tx, set } =
      saved && holdsNothing(saved) && this.exec.stream
        ? await this.streamedFirst(family, keys, next, saved, stats)
        : await this.printedSync(family, full, keys, next, saved, stats);
    this.deferIpset(set.after);
    set.commit();
    this.countRules(family, tx, full, next);
    this.commit(family, next, full, stale);
  }

  /** A sync's restore printed whole, then run (dry-run prints it), with the hairpin set's input before and alongside it. */
  private async printedSync(
    family: Family,
    full: boolean,
    keys: Set<string>,
    next: Map<string, WrittenService | undefined>,
    saved: SavedState | undefined,
    stats: SyncStats,
  ) {
    const tr = performance.now();
    const tx = full ? this.fullTx(family, keys, next, saved) : this.partialTx(family, keys, next);
    if (tx.error) throw new KpngError("invalid_argument", `iptables ${family} restore: ${tx.error}`);
    const text = printRestore(tx);
    stats.bytes[family] = text.length;
    const set = this.hairpinEdits(family, full, next);
    stats.renderMs += performance.now() - tr;
    // The members go in before the restore commits (a DNAT to a new endpoint
    // never exists without its hairpin masquerade), but the restore starts
    // beside them: it parses and reads the kernel's chains meanwhile, its
    // first COMMIT held back until they are in (heldAtFirstCommit).
    const adding = set.before ? this.runIpset(set.before) : undefined;
    const jobs: Promise<void>[] = adding ? [adding] : [];
    if (text && this.ctx.config.dryRun) this.ctx.out(`# ${restoreCommand(family)} --noflush\n${text}`);
    else if (text) jobs.push(this.failedCounted(family, full, this.restore(family, tx, text, { gate: adding, full })));
    jobs.push(this.runIpset(set.alongside));
    await allDone(jobs);
    return { tx, set };
  }

  /**
   * The first restore (kpng holds nothing in the tables yet) streamed to
   * iptables-restore as its services render (streamRestore): iptables-restore
   * parses as it reads, so its parsing overlaps the rendering instead of
   * following it. The hairpin set's fill input is built as the services
   * render (StreamedFill) and `ipset` starts with it once the last one has
   * rendered, before the restore's last piece (its COMMIT) is written: the
   * fill runs beside the kernel's commit, as before, and the commit no
   * longer waits for the whole set to be counted and printed first. Started
   * with the restore instead, `ipset` took the CPU the render needed (10,000
   * services on a loaded 2-core machine: first syncs of 35-41 s against
   * 25-29 s; docs/results/2026-11.md). The set must exist before the restore
   * commits (its KPNG-POSTROUTING rule names it): created first, unless setup
   * has just created it (the first sync after start-up: one `ipset` run less
   * on the way to the first rules).
   */
  private async streamedFirst(
    family: Family,
    keys: Set<string>,
    next: Map<string, WrittenService | undefined>,
    saved: SavedState | undefined,
    stats: SyncStats,
  ) {
    if (this.hairpinSet && !this.setsFresh) await this.runIpset(ipsetCreate(family));
    const tx = new Transaction();
    const fill = this.hairpinSet ? new StreamedFill(family, keys.size) : undefined;
    const services = function* (this: IptablesBackend): Generator<ServiceRules> {
      for (const rules of this.rendered(family, keys, next)) {
        fill?.add(rules.hairpin);
        yield rules;
      }
    }.call(this);
    const steps = fullTransactionSteps({ fixed: renderFixed(this.config, family, { hairpinSet: this.hairpinSet }), services, saved }, tx);
    let renderMs = 0;
    let bytes = 0;
    let filling: Promise<void> = Promise.resolve();
    const timed = function* (this: IptablesBackend): Generator<void> {
      try {
        for (;;) {
          const t = performance.now();
          const step = steps.next();
          renderMs += performance.now() - t;
          if (step.done) break;
          yield;
        }
      } finally {
        // whatever happened to the render: the fill's input ends, `ipset` never waits for more
        if (fill) {
          fill.end();
          filling = this.ipt.ipset(fill.chunks);
        }
      }
    }.call(this);
    const chunks = function* () {
      for (const chunk of streamRestore(tx, timed)) {
        bytes += chunk.length;
        yield chunk;
      }
    };
    // Done at its exit, not its marker, as every full restore (restore below).
    const restoring = this.ipt.restore(family, chunks(), { toExit: true }).catch(async (err) => {
      // The preamble may be what failed, maybe before the restore read the rest:
      // the services rendered to the end, then the same restore whole without it.
      for (const _ of timed);
      if (tx.error) throw new KpngError("invalid_argument", `iptables ${family} restore: ${tx.error}`);
      await this.restoreWithoutBulk(family, tx, err);
    });
    // the stream ends once every service is rendered, and the set's fill has started by then
    const [restored] = await Promise.allSettled([this.failedCounted(family, true, restoring)]);
    const [filled] = await Promise.allSettled([filling]);
    for (const r of [restored, filled]) if (r.status === "rejected") throw r.reason;
    stats.bytes[family] = bytes;
    stats.renderMs += renderMs;
    const set: HairpinInput = { before: "", alongside: "", after: "", commit: () => fill && (this.hairpin[family] = fill.members) };
    return { tx, set };
  }

  /** counts a refused restore in kube-proxy's sync failure metric */
  private failedCounted(family: Family, full: boolean, restoring: Promise<void>): Promise<void> {
    return restoring.catch((err) => {
      this.ctx.metrics?.transactionFailed(this.name, ipVersion(family), !full);
      throw err;
    });
  }

  /**
   * `gate`: what must be done before the restore commits anything (heldAtFirstCommit).
   * `full`: done at the restore's exit, not its marker. Start-up's collection
   * follows the first sync at once: settled at the marker, a full restore's
   * program was still exiting then, and the heap stayed larger for good (the
   * startup bench's RSS in iptables mode, docs/backends/iptables.md). A full sync is no change's
   * latency; a partial one keeps the marker.
   */
  private async restore(family: Family, tx: Transaction, text: string, opts: { gate?: Promise<void>; full: boolean }) {
    const { gate } = opts;
    try {
      await this.ipt.restore(family, gate ? heldAtFirstCommit(text, gate) : text, { toExit: opts.full });
    } catch (err) {
      // The gate's own failure fails the sync (its job), not counted as a refused
      // restore: nothing was committed. Otherwise a retry waits for it as well.
      if (gate && (await failed(gate))) return;
      await this.restoreWithoutBulk(family, tx, err, text);
    }
  }

  /**
   * After `failed`: the bulk preamble's `-S` makes iptables-nft read every
   * chain of the table, and one it cannot parse (written by nft into
   * iptables' own table) fails the restore. Slow but correct: the same
   * restore without it, unless `sent` already was that.
   */
  private async restoreWithoutBulk(family: Family, tx: Transaction, failed: unknown, sent?: string) {
    const plain = printRestore(tx, { bulk: false });
    if (plain === sent) throw failed;
    this.log.warn("bulk restore failed, retrying without the bulk preamble", { family, error: errorMessage(failed) });
    await this.ipt.restore(family, plain);
  }

  /**
   * The hairpin set's input for this sync. Full: the set created before the
   * restore whose rule names it, its members replaced alongside the restore.
   * Partial: members added before the restore, deleted after it (deferIpset). `commit`
   * records them once everything applied.
   */
  private hairpinEdits(family: Family, full: boolean, next: Map<string, WrittenService | undefined>): HairpinInput {
    const none = { before: "", alongside: "", after: "", commit: () => {} };
    if (!this.hairpinSet) return none;
    if (full) {
      const members = new HairpinMembers();
      members.reset([...next.values()].flatMap((w) => (w ? [w.hairpin] : [])));
      return {
        ...none,
        before: ipsetCreate(family),
        alongside: ipsetFull(family, members.members()),
        commit: () => (this.hairpin[family] = members),
      };
    }
    const changes = [...next].map(([key, w]) => ({ before: this.written[family].get(key)?.hairpin, after: w?.hairpin }));
    const { adds, deletes, next: counts } = this.hairpin[family].edits(changes);
    return {
      ...none,
      before: ipsetEdits(family, adds, []),
      after: ipsetEdits(family, [], deletes),
      commit: () => this.hairpin[family].apply(counts),
    };
  }

  /**
   * Members that left the hairpin set are deleted after the restore, off
   * the sync's path: a stale member matches only a packet from an endpoint
   * to its own address and port after DNAT, and no rule DNATs to it any more.
   * The next sync waits for the deletion; if it failed, that sync is full
   * (the set is rebuilt).
   */
  private deferIpset(input: string) {
    if (!input) return;
    const prev = this.lagging;
    const run = prev ? prev.then(() => this.runIpset(input)) : this.runIpset(input);
    this.lagging = run.catch((err) => {
      this.needFull = true;
      this.log.warn("hairpin set: deleting members failed; the next sync is full", { error: errorMessage(err) });
    });
  }

  private async runIpset(input: string) {
    if (!input) return;
    if (this.ctx.config.dryRun) this.ctx.out(`# ${ipsetCommand} restore\n${input}`);
    else await this.ipt.ipset(input);
  }

  private render(key: string, family: Family): ServiceRules | undefined {
    const t = this.tracker.get(key);
    const largeCluster = this.tracker.endpointTotal > largeClusterEndpoints;
    return (
      t &&
      renderService({ service: t.service, endpoints: t.endpoints, family, config: this.config, largeCluster, hairpinSet: this.hairpinSet })
    );
  }

  /** Renders every service once, straight into the transaction: only the compact record of each stays in memory. */
  private fullTx(
    family: Family,
    keys: Set<string>,
    next: Map<string, WrittenService | undefined>,
    saved: SavedState | undefined,
  ): Transaction {
    return fullTransaction({
      fixed: renderFixed(this.config, family, { hairpinSet: this.hairpinSet }),
      services: this.rendered(family, keys, next),
      saved,
    });
  }

  /** Each service rendered as it is asked for, its compact record kept in `next`. */
  private *rendered(family: Family, keys: Set<string>, next: Map<string, WrittenService | undefined>): Generator<ServiceRules> {
    for (const key of keys) {
      const rules = this.render(key, family);
      next.set(key, rules && compact(rules));
      if (rules) yield rules;
    }
  }

  private partialTx(family: Family, keys: Set<string>, next: Map<string, WrittenService | undefined>): Transaction {
    const changes: ServiceChange[] = [];
    for (const key of keys) {
      const after = this.render(key, family);
      next.set(key, after && compact(after));
      changes.push({ before: this.written[family].get(key), after });
    }
    return partialTransaction(changes);
  }

  /**
   * kube-proxy's rule counts per table: what this restore wrote, and what
   * kpng owns now (a full restore writes it all; a partial one changes the
   * count by the changed services' difference). Before `commit`: `written`
   * still holds what the services had.
   */
  private countRules(family: Family, tx: Transaction, full: boolean, next: Map<string, WrittenService | undefined>) {
    const totals = this.ruleTotals[family];
    for (const table of tables) {
      if (full) totals.set(table, tx.rulesWritten(table));
      else
        for (const [key, w] of next)
          totals.set(table, totals.get(table)! + (w?.rules[table] ?? 0) - (this.written[family].get(key)?.rules[table] ?? 0));
      this.ctx.metrics?.iptablesRules(ipVersion(family), table, totals.get(table)!, tx.rulesWritten(table));
    }
  }

  /** Records what is now programmed, and the UDP flows that became stale. */
  private commit(family: Family, next: Map<string, WrittenService | undefined>, full: boolean, stale: StaleFlow[]) {
    const written = this.written[family];
    const udp = this.udp[family];
    if (full) written.clear();
    for (const [key, w] of next) {
      if (w) written.set(key, w);
      else written.delete(key);
      const t = this.tracker.get(key);
      const before = udp.get(key) ?? new Map();
      const after = t ? udpFrontends(t.service, t.endpoints, family) : new Map<string, UdpFrontend>();
      if (before.size || after.size) stale.push(...staleUdpFlows(before, after));
      if (after.size) udp.set(key, after);
      else udp.delete(key);
    }
  }

  async cleanup() {
    await this.lagging;
    for (const family of this.families) {
      let text: string;
      try {
        const saved = parseSave(await this.ipt.save(family));
        const tx = new Transaction();
        for (const j of saved.jumps) tx.removeSaved(j.table, j.line);
        for (const [table, names] of saved.chains) {
          for (const name of names) {
            tx.declare(table, name);
            tx.deleteChain(table, name);
          }
        }
        text = printRestore(tx);
      } catch (err) {
        this.log.warn("cleanup: cannot read the current rules", { family, error: errorMessage(err) });
        continue;
      }
      if (this.ctx.config.dryRun) this.ctx.out(`# ${restoreCommand(family)} --noflush\n${text}`);
      else if (text) await this.ipt.restore(family, text, { toExit: true });
      // After the rule that matched it is gone (and freed); absent (never created, no ipset) is fine.
      if (!this.hairpinSet) continue;
      try {
        await this.runIpset(`destroy ${hairpinSets[family]}\n`);
      } catch (err) {
        this.log.debug("cleanup: no hairpin set to destroy", { family, error: errorMessage(err) });
      }
    }
    this.written.v4.clear();
    this.written.v6.clear();
    this.hairpin = { v4: new HairpinMembers(), v6: new HairpinMembers() };
    this.needFull = true;
    this.restored = false;
  }
}

/** the same chains with the same rules */
function sameChains(a: WrittenService, b: WrittenService): boolean {
  if (a.chains.size !== b.chains.size) return false;
  for (const [k, d] of a.chains) if (b.chains.get(k) !== d) return false;
  return true;
}

/** whether `job` fails, once it settles */
const failed = (job: Promise<unknown>): Promise<boolean> =>
  job.then(
    () => false,
    () => true,
  );

/** no KPNG- chain and no jump to one: the tables hold nothing of kpng's (a first start) */
const holdsNothing = (saved: SavedState) => saved.jumps.length === 0 && [...saved.chains.values()].every((c) => c.size === 0);

/** `ipset restore` inputs of one sync's hairpin set, by when they run, and what records them once applied */
interface HairpinInput {
  before: string;
  alongside: string;
  after: string;
  commit: () => void;
}
