// Notices when another process changes kpng's tables — `nft delete table ip
// kpng`, `nft flush ruleset` (a firewall reload), a chain flushed, a rule,
// chain, set or element added or deleted — as it is committed, so the
// backend restores its rules promptly instead of never, and
// without polling the ruleset.
//
// How: the kernel's ruleset change events, each commit closed by a new
// generation, read by kpng from a netlink socket (netlink-socket.ts) — or,
// where that socket cannot be opened, printed by a long-running `nft
// monitor`, every commit closed by "# new generation N by process P (comm)".
// The netlink reader words its events as the monitor's lines, so both are
// read alike here. The pid cannot tell kpng's commits from others': the kernel
// reports it in the initial pid namespace, which kpng in a container does
// not see. So every kpng transaction carries a stamp: it replaces the one
// element of the set `ip kpng sync-stamp` with a fresh value. A commit that
// adds a stamp kpng sent (and has not seen yet) is kpng's; any other commit
// that touches `ip kpng` or `ip6 kpng` is someone else's.
//
// Below, "the monitor" is either source. Cost, netlink: next to no memory (one
// receive buffer) and CPU per event read. The socket is closed for a full
// sync all the same: the sync's events (one per element) would overflow it, and cost
// the kernel and kpng their formatting and parsing for nothing. A new socket
// listens as soon as it is open, so the proof below runs at once, and the
// window it leaves is the moment between the full sync's commit and it.
//
// Cost, `nft monitor`: it first loads the whole ruleset into its cache and
// keeps it (memory that grows with the ruleset, whatever its arguments), and
// formats every event, kpng's own included (nft 1.0.6): an endpoint change
// is a few events, but a full sync is one per element, which at scale cost
// the monitor much CPU and overflowed its socket ("We lost some
// netlink events"). The runner (executor.ts)
// therefore stops the monitor for a full sync — it replaces both tables, so
// whatever anyone did before its commit is gone anyway — and starts a new
// one after. A new monitor first fetches the whole ruleset (about as long as
// loading it took: bench nft-repair prints it), then listens;
// the runner proves it does with a stamp it must print. That stamp replaces
// the full sync's with `delete element`, which fails if the table, the set or
// the element went meanwhile (delete table, flush ruleset): reported too.
// What that window misses: a chain flushed or an element edited before the
// new monitor listens, i.e. shortly after a full sync, longer the bigger the
// ruleset.
//
// Someone else's commit is reported at its first event when kpng has nothing
// in flight (no stamp it waits for), else when the commit ends. Events the
// monitor lost (a burst bigger than its 16 MB socket buffer) are reported as
// a change; so is the monitor exiting (what happened meanwhile is unknown).

import type { Logger } from "../../src/host/toolkit/index.ts";
import { SYNC_STAMP_SET, TABLE } from "./names.ts";
import type { Spawner } from "./session.ts";
import type { Op } from "./transaction.ts";

/** where the kernel's ruleset changes come from, as lines of `nft monitor` */
export interface EventSource {
  /** "netlink" or "nft monitor", for logs */
  readonly name: string;
  /** it listens as soon as open() returns (the monitor first loads the ruleset) */
  readonly listensAtOnce: boolean;
  /** starts listening; throws when it cannot */
  open(on: EventHandlers): EventStream;
}

export interface EventHandlers {
  /** one change, "# new generation ..." after a commit's last, or a line saying events were lost */
  line(line: string): void;
  /** the source stopped by itself: what changed meanwhile is unknown */
  exit(why: string): void;
}

export interface EventStream {
  close(): void;
  /** delivers what is pending now (a polled source) */
  poll?(): void;
}

/** a long-running `nft monitor` started by `spawner` */
export function monitorEvents(spawner: Spawner, argv: readonly string[] = MONITOR_ARGV): EventSource {
  return {
    name: "nft monitor",
    listensAtOnce: false,
    open(on) {
      let partial = "";
      let said = "";
      const channel = spawner.spawn(
        [...argv],
        {
          stdout(text) {
            const lines = (partial + text).split("\n");
            partial = lines.pop()!;
            for (const line of lines) on.line(line);
          },
          stderr: (text) => (said = (said + text).slice(-500)),
          exit: (code) => on.exit(`nft monitor exited (${code ?? "signal"})${said.trim() ? `: ${said.trim()}` : ""}`),
        },
        { HOME: "/dev/null" },
      );
      return { close: () => channel.kill() };
    },
  };
}

/**
 * `preferred` unless it cannot be opened (no libc to call, no netlink in
 * this kernel or sandbox), then `fallback` from then on; says which is used.
 */
export function firstWorking(preferred: EventSource, fallback: EventSource, log: Logger): EventSource {
  let use: EventSource | undefined;
  return {
    get name() {
      return (use ?? preferred).name;
    },
    get listensAtOnce() {
      return (use ?? preferred).listensAtOnce;
    },
    open(on) {
      if (use) return use.open(on);
      try {
        const stream = preferred.open(on);
        use = preferred;
        log.info(`watching kpng's tables through ${preferred.name}`);
        return stream;
      } catch (err) {
        use = fallback;
        log.warn(`watching kpng's tables through ${fallback.name}: cannot use ${preferred.name}`, {
          err: err instanceof Error ? err.message : String(err),
        });
        return fallback.open(on);
      }
    },
  };
}

export interface WatchOptions {
  /** where `nft monitor` runs when no `source` is given */
  spawner?: Spawner;
  /** default: `nft monitor` through `spawner` */
  source?: EventSource;
  log: Logger;
  /** someone else changed kpng's tables; `what` is the first change seen (a line of `nft monitor`) */
  onForeign(what: string): void;
  /** after this many monitors (processes or sockets) in a row ended without seeing a stamp, watching stops (default 3) */
  maxFailures?: number;
}

/**
 * `nft monitor` prints only when the ruleset changes, so it would outlive a
 * kpng killed with -9 until the next change (forever, in a namespace that is
 * gone): where util-linux's setpriv is, it runs with a parent-death signal.
 */
export const MONITOR_ARGV: readonly string[] = Bun.which("setpriv")
  ? ["setpriv", "--pdeathsig", "TERM", "--", "nft", "monitor"]
  : ["nft", "monitor"];

/** a line of `nft monitor` about kpng's own tables: "<verb> <object> ip|ip6 kpng ..." */
const touchesKpng = new RegExp(`^\\S+ \\S+ ip6? ${TABLE}(?: |$)`);
const stampAdded = new RegExp(`^add element ip ${TABLE} ${SYNC_STAMP_SET} \\{ "([^"]+)" \\}`);
const NEW_GENERATION = "# new generation";
/** what nft monitor prints when its socket overflowed */
const LOST = /lost .*events/i;
/** stamps sent and not seen yet; more are forgotten (a refused transaction's never comes) */
const MAX_EXPECTED = 32;
/** values are interface names for nft: at most 15 bytes */
const SEQ_SPAN = 36 ** 6;

export class RulesWatch {
  private live: EventStream | undefined;
  private readonly source: EventSource;
  /** the commit being read: its first line about kpng's tables, and whether it carried a stamp of ours */
  private batch: Batch = { ours: false, reported: false };
  /** stamps being sent or committed and not printed yet: kpng's commits the monitor may still print */
  private readonly expected = new Set<string>();
  private readonly waiters = new Map<string, () => void>();
  private readonly nonce = Math.random().toString(36).slice(2, 6).padEnd(4, "0");
  private seq = 0;
  /** the stamp now in the kernel, as far as kpng knows */
  private current: string | undefined;
  /** the stamp of the transaction being sent, and whether it replaces the current one */
  private sending: { value: string; replaces: boolean } | undefined;
  private failures = 0;
  private gaveUp = false;

  constructor(private readonly opts: WatchOptions) {
    if (opts.source) this.source = opts.source;
    else if (opts.spawner) this.source = monitorEvents(opts.spawner);
    else throw new Error("RulesWatch: neither an event source nor a spawner");
  }

  /** true while a monitor runs */
  get running(): boolean {
    return this.live !== undefined;
  }

  /** a new monitor listens as soon as it is started: its proof needs no wait */
  get listensAtOnce(): boolean {
    return this.source.listensAtOnce;
  }

  /**
   * The statements that stamp the next transaction, to go at its end, and
   * the stamp's value. "full": the transaction rewrites the tables (in place,
   * deleting the stamp set with what it does not keep, or by re-creating them),
   * so the set is added anew; "partial": the current stamp is replaced (the transaction
   * fails if it is gone); "proof": nothing changes in the end (the current
   * stamp deleted and put back, failing if it is gone; a fresh one added and
   * deleted), but the monitor prints the fresh one.
   */
  stamp(kind: "full" | "partial" | "proof"): { ops: Op[]; value: string } {
    const value = `k-${this.nonce}-${(++this.seq % SEQ_SPAN).toString(36)}`;
    this.sending = { value, replaces: kind !== "proof" };
    this.expected.add(value);
    if (this.expected.size > MAX_EXPECTED) this.expected.delete(this.expected.values().next().value!);
    const el = (verb: "add" | "delete", v: string): Op => ({
      kind: "elements",
      verb,
      family: "ip",
      set: SYNC_STAMP_SET,
      items: [{ key: `"${v}"` }],
    });
    const ops: Op[] = [
      {
        kind: "set",
        verb: "add",
        family: "ip",
        set: { name: SYNC_STAMP_SET, type: "ifname", comment: "the last transaction kpng committed" },
      },
    ];
    const current = kind === "full" ? undefined : this.current;
    if (current) ops.push(el("delete", current));
    if (current && kind === "proof") ops.push(el("add", current));
    ops.push(el("add", value));
    if (kind === "proof") ops.push(el("delete", value));
    return { ops, value };
  }

  /** the stamped transaction committed (true), or was refused or its fate is unknown (false) */
  settle(committed: boolean): void {
    const s = this.sending;
    this.sending = undefined;
    if (!s) return;
    // After an unknown outcome only a full sync (a new stamp set) is safe, and one follows.
    if (!committed) this.current = undefined;
    else if (s.replaces) this.current = s.value;
    // A refused transaction prints nothing. One whose fate is unknown may: taken for someone else's, it costs a full sync, which follows a failure anyway.
    if (!committed) this.expected.delete(s.value);
  }

  /** Resolves true once the monitor has printed the stamp `value` (perhaps already), false after `ms`. */
  seen(value: string, ms: number): Promise<boolean> {
    this.live?.poll?.();
    if (!this.expected.has(value)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters.delete(value);
        resolve(false);
      }, ms);
      this.waiters.set(value, () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** A change found another way (a stamp that should be in the kernel is not). */
  report(what: string): void {
    this.opts.onForeign(what);
  }

  /** Starts a monitor unless one runs (or watching was given up). */
  start(): void {
    if (this.live || this.gaveUp) return;
    let stream: EventStream | undefined;
    try {
      stream = this.source.open({ line: (line) => this.line(line), exit: (why) => this.exited(stream, why) });
    } catch (err) {
      this.failed(`cannot start ${this.source.name}: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    this.live = stream;
    this.batch = { ours: false, reported: false };
    // a new monitor prints nothing committed before it
    this.expected.clear();
  }

  /** Stops the monitor (a full sync follows, or kpng stops). */
  stop(): void {
    const live = this.live;
    this.live = undefined;
    live?.close();
  }

  private exited(stream: EventStream | undefined, why: string) {
    if (!stream || this.live !== stream) return; // stopped on purpose
    this.live = undefined;
    // What changed while nobody watched is unknown: the backend resyncs, which starts a new monitor.
    this.failed(why);
  }

  private failed(why: string) {
    if (++this.failures >= (this.opts.maxFailures ?? 3)) {
      this.gaveUp = true;
      this.opts.log.error("stopped watching kpng's tables: changes by other processes will not be noticed", { reason: why });
      return;
    }
    this.opts.onForeign(why);
  }

  private line(line: string) {
    if (line.startsWith(NEW_GENERATION)) {
      const { first, ours, reported } = this.batch;
      this.batch = { ours: false, reported: false };
      if (first !== undefined && !ours && !reported) this.opts.onForeign(first);
      return;
    }
    if (line.startsWith("#")) {
      if (LOST.test(line)) this.opts.onForeign(line);
      return;
    }
    if (!touchesKpng.test(line)) return;
    if (this.batch.first === undefined) {
      this.batch.first = line.length > 200 ? `${line.slice(0, 200)}…` : line;
      // kpng commits nothing now, so this is someone else's: said at once, not after the commit's last
      // event (a flushed big ruleset is an event per element, long for the monitor to print).
      if (this.expected.size === 0) {
        this.batch.reported = true;
        this.opts.onForeign(this.batch.first);
      }
    }
    const stamp = stampAdded.exec(line)?.[1];
    if (stamp && this.expected.delete(stamp)) {
      this.batch.ours = true;
      this.failures = 0;
      this.waiters.get(stamp)?.();
      this.waiters.delete(stamp);
    }
  }
}

interface Batch {
  /** its first line about kpng's tables */
  first?: string;
  /** it carried a stamp of kpng's */
  ours: boolean;
  /** already reported as someone else's */
  reported: boolean;
}
