// The only code of the nft backend that reaches the kernel: it hands a
// printed transaction to `nft -f -` (one atomic batch) through an Executor,
// or, for small partial syncs, to a running `nft -i` (session.ts) through a
// Spawner; a first load's elements go as batches kpng encodes itself
// (netlink-batch.ts) on its own socket (netlink-socket.ts). Tests replace
// all three with recorders and fakes or point them into a network namespace.

import { spawn } from "node:child_process";
import { availableParallelism } from "node:os";
import { allDone, errorMessage, type Executor, isUnavailable, KpngError, type Logger, runCommand } from "../../src/host/toolkit/index.ts";
import {
  batchable,
  encodeBatch,
  fillRounds,
  parseReplies,
  refusedElement,
  tableQuery,
  tablesFound,
  type EncodedBatch,
} from "./netlink-batch.ts";
import { FAMILIES, type TableFamily } from "./names.ts";
import { type BatchSocket, errnoText } from "./netlink-socket.ts";
import type { NftSession, Spawner } from "./session.ts";
import { splitFirstLoad, Transaction, type Op } from "./transaction.ts";
import type { RulesWatch } from "./watch.ts";

/** Runs real programs (the toolkit's runCommand). Fails with the program's stderr, so callers can see "0 flow entries" and the like. */
export function processExecutor(): Executor {
  return {
    async run(argv, stdin) {
      const { code, stdout, stderr } = await runCommand(argv, stdin ?? "");
      if (code !== 0) throw new KpngError("internal", `${argv.join(" ")}: exit ${code}: ${stderr.trim()}`);
      return stdout;
    },
  };
}

/** Starts real long-lived programs, after `prefix` (e.g. `ip netns exec NS`). */
export function processSpawner(prefix: string[] = []): Spawner {
  return {
    spawn(argv, on, env) {
      const [cmd, ...args] = [...prefix, ...argv];
      const p = spawn(cmd, args, { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, ...env } });
      p.stderr.setEncoding("utf8").on("data", (d: string) => on.stderr(d));
      // nft -i prints nothing on stdout for add/delete/flush; nft monitor prints its events there
      if (on.stdout) p.stdout.setEncoding("utf8").on("data", (d: string) => on.stdout?.(d));
      else p.stdout.resume();
      let ended = false;
      const exit = (code: number | null) => {
        if (!ended) on.exit(code);
        ended = true;
      };
      p.on("error", () => exit(null));
      p.on("close", exit); // after the last stderr byte
      p.stdin.on("error", () => {}); // a dead process shows as exit
      return {
        write: (text) => void p.stdin.write(text),
        kill: () => {
          p.stdin.end();
          p.kill();
        },
      };
    },
  };
}

/**
 * Partial transactions above this size go to `nft -f -`. The session takes
 * big ones as a file (session.ts), cheaper than a new process at every size
 * bench/nft-input.bench.ts measures, but it gives a transaction `timeoutMs` (10 s) and then calls its
 * outcome unknown; `nft -f -` waits as long as nft takes.
 */
export const SESSION_MAX_BYTES = 1 << 20;

/**
 * A first load into empty tables with this many elements or more goes in
 * batches side by side (splitFirstLoad), one per core, 2 to 4: below it, a
 * process more costs about what parsing in parallel gains.
 */
export const FIRST_LOAD_SPLIT_ELEMENTS = 20_000;
const FIRST_LOAD_PARTS = Math.min(4, Math.max(2, availableParallelism()));

/**
 * After a full sync a new `nft monitor` first fetches the whole ruleset into
 * its cache, then listens (nft 1.0.6): about as long, and as much CPU, as
 * loading the ruleset took, which grows with its size.
 * A commit during the fetch makes it start over, so the proof (a stamp the
 * monitor must print) waits that long before committing, then twice as long
 * each time its echo does not come within PROOF_ECHO_MS.
 */
const PROOF_FIRST_WAIT_MS = { min: 10, max: 2000 };
const PROOF_ECHO_MS = 50;
const PROOF_TRIES = 6;

export interface ApplyOptions {
  /** the transaction rewrites all of kpng's tables (a full sync, in place or by re-creating them): it goes to `nft -f -`, with the watch paused */
  full?: boolean;
  /** no stamp: the transaction removes the tables (cleanup) */
  unstamped?: boolean;
  /** a full sync over tables that held nothing: a big one loads in batches side by side */
  fresh?: boolean;
  /** the part of this first load sent ahead (startFirstLoad): its ops are not sent again */
  ahead?: AheadLoad;
}

/** a first load's base, sent before its services were rendered (NftRunner.startFirstLoad) */
export interface AheadLoad {
  /** the ops of the full sync's transaction it stands for */
  covers: ReadonlySet<Op>;
  /** settles when `nft -f` has loaded it (or failed to) */
  loading: Promise<unknown>;
}

/** opens the socket a first load sends its elements on (netlink-socket.ts openBatchSocket, in kpng's tables' namespace) */
export type BatchSocketOpener = () => BatchSocket;

export class NftRunner {
  private gaveUp = false;
  /** the netlink element load could not be used: said once, then today's path */
  private netlinkFailed = false;
  /** the monitor's proof after the last full sync, running; the next transaction waits for it */
  private proving: Promise<void> | undefined;

  constructor(
    private readonly exec: Executor,
    private readonly session?: NftSession,
    private readonly log?: Logger,
    /** sees other processes' changes to kpng's tables (watch.ts); stamps every transaction */
    private readonly watch?: RulesWatch,
    /** where a first load sends its elements, without nft (netlink-batch.ts); absent: all through `nft -f` */
    private readonly batchSocket?: BatchSocketOpener,
  ) {}

  /**
   * Applies the transaction atomically; a transaction that failed validation
   * is never sent. Full syncs and big transactions run as `nft -f -`, small
   * partial ones through the session when there is one.
   */
  async apply(tx: Transaction, opts: ApplyOptions = {}): Promise<void> {
    if (tx.err) throw new KpngError("internal", `nft transaction not applied: ${tx.err}`);
    if (tx.empty) return;
    await this.proving;
    const watch = opts.unstamped ? undefined : this.watch;
    if (!watch) return this.send(tx, opts);
    // A full sync's events (one per element) would swamp the monitor (watch.ts); it replaces everything anyway.
    if (opts.full) watch.stop();
    const t0 = performance.now();
    await this.stamped(watch, tx, opts);
    // The rules are in: the caller goes on while the new monitor gets ready.
    if (opts.full) this.prove(watch, performance.now() - t0);
  }

  /**
   * Not inline in apply(): a closure made there would keep apply's scope,
   * and with it the whole transaction, alive until the proof ends, past
   * start-up's collection of the heap (src/core/release-memory.ts).
   */
  private prove(watch: RulesWatch, loadMs: number) {
    this.proving = this.resumeWatch(watch, loadMs).finally(() => (this.proving = undefined));
  }

  /**
   * Starts a first load before its services are rendered: when neither of
   * kpng's tables exists (asked on kpng's netlink socket, a fraction of a
   * millisecond, where a listing takes nft processes), `base()` (tables and
   * base objects, NftSync.firstLoadBase) goes to `nft -f` now, and loads on
   * another core while this thread renders. The full sync's apply then sends
   * only the rest (`ahead`). Undefined, with nothing sent, when a table
   * exists, kpng cannot tell, or first loads do not go through kpng's socket:
   * the full sync lists the tables as before.
   */
  async startFirstLoad(base: () => { tx: Transaction; covers: ReadonlySet<Op> } | undefined): Promise<AheadLoad | undefined> {
    const socket = this.encodesFirstLoads ? this.openSocket() : undefined;
    if (!socket) return undefined;
    let found: Set<TableFamily>;
    try {
      found = tablesFound(FAMILIES, socket.send(tableQuery(FAMILIES)));
    } catch (err) {
      this.log?.debug("cannot ask whether kpng's tables exist: the full sync lists them", { err: errorMessage(err) });
      return undefined;
    } finally {
      socket.close();
    }
    if (found.size) return undefined;
    // the load is kpng's full sync, begun: after the last one's proof, with the watch paused, as apply() does
    await this.proving;
    const ahead = base();
    if (!ahead) return undefined;
    this.watch?.stop();
    const loading = this.exec.run(["nft", "-f", "-"], ahead.tx.print());
    loading.catch(() => {}); // awaited by apply(), which reports a failure; the render may throw first
    await inputWritten();
    return { covers: ahead.covers, loading };
  }

  /** a first load's elements go on kpng's own socket, unprinted (unless that socket turns out unusable) */
  get encodesFirstLoads(): boolean {
    return this.batchSocket !== undefined && !this.netlinkFailed;
  }

  /** resolves when no proof of the monitor is running (tests, benchmarks) */
  async settled(): Promise<void> {
    await this.proving;
  }

  /** sends `tx` with a stamp at its end */
  private async stamped(watch: RulesWatch, tx: Transaction, opts: ApplyOptions, kind: "partial" | "proof" = "partial"): Promise<string> {
    const { ops, value } = watch.stamp(opts.full ? "full" : kind);
    const stamp = new Transaction();
    for (const op of ops) stamp.add(op);
    try {
      await this.send(tx, opts, stamp);
    } catch (err) {
      watch.settle(false);
      throw err;
    }
    watch.settle(true);
    return value;
  }

  /**
   * Starts the monitor again after a full sync and proves it listens: a
   * transaction whose stamp it must print, and which changes nothing in the
   * end. It deletes and puts back the full sync's stamp, so it fails if the
   * tables went before the monitor listened: reported like any other change. `loadMs`: how long the full
   * sync took to load, about what the monitor's first fetch takes.
   */
  private async resumeWatch(watch: RulesWatch, loadMs: number): Promise<void> {
    watch.start();
    // the netlink socket listens once open; the monitor first fetches the ruleset, about as long as the load took
    let wait = Math.min(PROOF_FIRST_WAIT_MS.max, Math.max(PROOF_FIRST_WAIT_MS.min, loadMs));
    for (let i = 0; i < PROOF_TRIES && watch.running; i++, wait *= 2) {
      // A socket listens at once; still, the first proof (and the `nft -i` it may start) waits a turn of
      // the loop: the caller's sync is done, and it says so first.
      if (i > 0 || !watch.listensAtOnce) await new Promise((r) => setTimeout(r, wait));
      else await new Promise<void>((r) => setImmediate(r));
      if (!watch.running) return;
      let value: string;
      try {
        value = await this.stamped(watch, new Transaction(), {}, "proof");
      } catch (err) {
        watch.report(`kpng's sync stamp is gone: ${err instanceof Error ? err.message : String(err)}`);
        return;
      }
      if (await watch.seen(value, PROOF_ECHO_MS)) return;
    }
    if (watch.running) this.log?.warn("nft monitor does not report kpng's own commits: changes by other processes may go unnoticed");
  }

  private async send(tx: Transaction, opts: ApplyOptions, stamp?: Transaction): Promise<void> {
    // the base sent while the services rendered is in (or this fails, as the whole transaction would have)
    const sent = opts.ahead?.covers;
    if (opts.ahead) await opts.ahead.loading;
    if (opts.full && opts.fresh && this.encodesFirstLoads && (await this.netlinkLoad(tx, stamp, sent))) return;
    if (sent) tx = transactionOf(tx.ops.filter((op) => !sent.has(op)));
    if (opts.full && opts.fresh) {
      const [skeleton, ...batches] = splitFirstLoad(tx, FIRST_LOAD_PARTS, FIRST_LOAD_SPLIT_ELEMENTS);
      if (batches.length) {
        await this.exec.run(["nft", "-f", "-"], skeleton.print() + (stamp?.print() ?? ""));
        return this.loadSideBySide(batches);
      }
    }
    const script = tx.print() + (stamp?.print() ?? "");
    if (this.session && !opts.full && script.length <= SESSION_MAX_BYTES && this.sessionUsable())
      try {
        return await this.session.apply(script);
      } catch (err) {
        // nothing was sent: the same transaction as a one-shot
        if (!isUnavailable(err)) throw err;
      }
    await this.exec.run(["nft", "-f", "-"], script);
  }

  /**
   * A first load with its elements encoded by kpng: everything else (tables,
   * chains, rules, sets, the elements nft alone encodes, the stamp) through
   * `nft -f`, then the elements in batches of kpng's own, one per round of
   * fillRounds (each round commits on its own). Most of nft's time on a big
   * load goes to parsing and evaluating elements, which this skips; the
   * kernel's work stays. Over empty tables, as splitFirstLoad: until the
   * last round commits, some services have no rules, which is no worse than
   * before the load. A refused round fails the apply, the rounds before it
   * committed (the full sync that follows rewrites the tables in place, as
   * after any failure). False (nothing sent) when the
   * socket cannot be opened: said once, and today's path is taken. `sent`:
   * ops of `tx` already loaded (a base sent ahead), not sent again.
   */
  private async netlinkLoad(tx: Transaction, stamp: Transaction | undefined, sent?: ReadonlySet<Op>): Promise<boolean> {
    const { elements, rest } = batchable(tx);
    if (!elements.length) return false;
    const socket = this.openSocket();
    if (!socket) return false;
    try {
      // the sets' declarations (for their layouts) come with the transaction, even those sent ahead
      const skeleton = transactionOf(sent ? rest.filter((op) => !sent.has(op)) : rest);
      // nft loads the skeleton in its own process while this one encodes the elements
      const loading = this.exec.run(["nft", "-f", "-"], skeleton.print() + (stamp?.print() ?? ""));
      loading.catch(() => {}); // awaited below
      await inputWritten();
      let encoded: ReturnType<typeof encodeBatch>[] | undefined;
      let encodeFailed: unknown;
      try {
        encoded = fillRounds(elements).map((round) => encodeBatch(round));
      } catch (err) {
        encodeFailed = err;
      } finally {
        await loading;
      }
      if (!encoded) {
        // kpng's own encoder failed on this input: nft reads the same statements
        this.netlinkUnusable(encodeFailed);
        await this.elementsThroughNft(elements.map((e) => e.op));
        return true;
      }
      const unencoded = encoded.flatMap((e) => e.unencoded);
      if (unencoded.length) await this.exec.run(["nft", "-f", "-"], transactionOf(unencoded).print());
      const batches = encoded.flatMap((e) => (e.batch ? [e.batch] : []));
      for (let i = 0; i < batches.length; i++) {
        let answers: Uint8Array[];
        try {
          answers = socket.send(batches[i].bytes);
        } catch (err) {
          if (!isUnavailable(err)) throw err;
          // nothing of this batch reached the kernel (the rounds before it did): its elements and the later
          // rounds' go through nft, in batches side by side
          this.netlinkUnusable(err);
          await this.elementsThroughNft(batches.slice(i).flatMap((b) => b.ops));
          return true;
        }
        try {
          refused(batches[i], answers);
        } catch (err) {
          // Whether kpng's encoding or the input is at fault, the retry (a full sync over what the
          // skeleton and the rounds before left, so not a first load) goes through nft, and so do later
          // first loads.
          this.netlinkUnusable(err);
          throw err;
        }
      }
      return true;
    } finally {
      socket.close();
    }
  }

  /** kpng's netlink socket for first loads; undefined, said once, when it cannot be opened */
  private openSocket(): BatchSocket | undefined {
    try {
      return this.batchSocket!();
    } catch (err) {
      this.netlinkUnusable(err);
      return undefined;
    }
  }

  private netlinkUnusable(err: unknown) {
    this.netlinkFailed = true;
    this.log?.warn("cannot load elements through kpng's netlink socket: first loads go through nft -f", { err: errorMessage(err) });
  }

  /** a first load's elements, over its loaded skeleton, through `nft -f` in batches side by side (the socket's fallback) */
  private elementsThroughNft(ops: readonly Op[]): Promise<void> {
    return this.loadSideBySide(splitFirstLoad(transactionOf(ops), FIRST_LOAD_PARTS, 0).slice(1));
  }

  /** element batches over a loaded skeleton, at the same time: all settle before the outcome is known (a retry must not race a batch still loading) */
  private async loadSideBySide(batches: Transaction[]): Promise<void> {
    await allDone(batches.map((b) => this.exec.run(["nft", "-f", "-"], b.print())));
  }

  /** asks the kernel to validate without committing (nft --check runs the batch and aborts it) */
  async check(tx: Transaction): Promise<void> {
    if (tx.err) throw new KpngError("internal", `nft transaction invalid: ${tx.err}`);
    try {
      await this.exec.run(["nft", "--check", "-f", "-"], tx.print());
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      throw new KpngError("unavailable", `nftables cannot load kpng's rules: ${msg}`);
    }
  }

  close() {
    this.watch?.stop();
    this.session?.close();
  }

  private sessionUsable(): boolean {
    if (this.session?.usable) return true;
    if (!this.gaveUp) this.log?.warn("nft -i keeps failing: partial syncs run as nft -f - from now on");
    this.gaveUp = true;
    return false;
  }
}

const transactionOf = (ops: readonly Op[]) => ops.reduce((t, op) => t.add(op), new Transaction());

/** throws what the kernel said about the batch, naming the element it refused; nothing of a refused batch was committed */
function refused(batch: EncodedBatch, answers: Uint8Array[]) {
  for (const a of answers)
    for (const r of parseReplies(a))
      if (r.error < 0) {
        const why = `${errnoText(-r.error)}${r.message ? ` (${r.message})` : ""}`;
        throw new KpngError("internal", `netlink batch of ${batch.elements} elements refused: ${refusedElement(batch, r)}: ${why}`);
      }
}

/**
 * One turn of the event loop, in which a process just started gets its
 * input: an executor may write stdin from the loop (node:child_process
 * does; processExecutor's Bun.spawn writes at once), so a process started
 * before a long synchronous step (an encoding, a render) would read nothing
 * until that step ends. One turn writes what a pipe holds at once (64 KB),
 * more than a skeleton.
 */
const inputWritten = () => new Promise<void>((r) => setImmediate(r));
