// The node agent's source: a central brain's globalv1 stream (`--api ADDR`,
// repeatable) instead of the API server. The cluster-wide model is decoded
// back into the objects the brain's index holds and fed to the same Brain a
// full node runs, so an agent computes the same node-local state.
//
// Brains are tried in the order given; when the stream breaks (or the brain's
// host stops answering HTTP/2 pings for 3 s) the agent moves to the next one
// at once, and only when every brain failed in a row does it
// wait (backoff doubling up to maxRetryMs). A new stream starts with Reset
// and a full model, which the mirror compares with what the agent already
// has: only real differences reach the brain, and so the backends (a brain
// failover is a diff, not a rewrite of the rules). Until the first change
// set nothing is computed, so a restarted agent leaves the rules in place.

import type { Brain } from "../brain/brain.ts";
import { sleep } from "../api/client/client.ts";
import { connectGrpc, isRefusal, type GrpcConnection } from "../api/client/grpc.ts";
import { clientCredentials, type ClientSecurity } from "../api/tls/client.ts";
import { globalOpChunks } from "../api/client/streams.ts";
import { formatApiAddress, parseClientAddress, type ApiAddress } from "../api/server/address.ts";
import { errorMessage, invalid } from "../errors.ts";
import { GlobalMirror } from "../global/mirror.ts";
import type { Logger } from "../log.ts";
import type { WireOp } from "../wire/ops.ts";
import { Ingest } from "./ingest.ts";

/** change sets of at least this many ops are followed by a full garbage collection */
const BIG_CHANGE_SET = 10_000;

export interface GlobalSourceOptions {
  /** brains' API addresses, in order of preference */
  apis: readonly string[];
  brain: Brain;
  log: Logger;
  /**
   * a connection not up, or a ping not answered, within this many ms is dead
   * (default 3000: a brain's event loop can be busy for long turns,
   * encoding a whole model for its first agent)
   */
  keepaliveMs?: number;
  /** TLS and credentials for TCP brains (files read again at each connection) */
  security?: ClientSecurity;
  /** called with the stats at once, before the first stream: metrics can show refusals meanwhile */
  onStats?: (stats: GlobalSourceStats) => void;
  /** first delay once every brain failed (default 200 ms), doubled up to maxRetryMs (default 5 s) */
  retryMs?: number;
  maxRetryMs?: number;
}

/** What the agent's stream has done, for metrics (read at scrape time). */
export interface GlobalSourceStats {
  /** the brains' addresses, in order of preference */
  readonly apis: readonly string[];
  /** the brain followed now, null between streams */
  connectedTo: string | null;
  /** streams that delivered at least one change set: the first, then each reconnect */
  connects: number;
  /** reconnects to another brain than the one followed before */
  failovers: number;
  /** by brain address: streams that ended or broke, and connections that failed */
  failures: Record<string, number>;
  /** of those, refusals: the brain refused our credentials, or we refused its certificate */
  refused: number;
  changeSets: number;
  /** Set and Delete ops received */
  ops: number;
  /** cluster events fed to the brain (objects that really changed) */
  events: number;
  /** items a resync sent again unchanged (no event) */
  unchanged: number;
  /** when the last change set was applied (epoch ms; 0 before the first) */
  lastChangeSetMs: number;
}

export interface GlobalSource {
  close(): void;
  readonly globalStats: GlobalSourceStats;
}

/** The mirror's change set, ended, into the brain and counted in `stats`; returns its events and unchanged items. */
function commit(mirror: GlobalMirror, ingest: Ingest, stats: GlobalSourceStats): { events: number; unchanged: number } {
  const ops = mirror.opsInSet;
  const unchanged = mirror.unchangedInSet;
  const events = mirror.end();
  ingest.events(events);
  // a change set is the whole model or a diff of it: after the first, every kind is known
  ingest.syncedAll();
  ingest.changed();
  // A whole model (a first sync, a resync) leaves its wire bytes and op
  // objects behind, about as much as the model itself: collect them now,
  // once, rather than carry them as resident memory until some later
  // collection (the agent is idle between changes).
  if (ops >= BIG_CHANGE_SET) Bun.gc(true);
  stats.changeSets++;
  stats.ops += ops;
  stats.lastChangeSetMs = Date.now();
  stats.events += events.length;
  stats.unchanged += unchanged;
  return { events: events.length, unchanged };
}

/** Resolves once the first change set is in the brain (waiting for a brain as long as it takes). */
export async function startGlobalSource(opts: GlobalSourceOptions): Promise<GlobalSource> {
  if (!opts.apis.length) throw invalid("flag --api: at least one brain address is required");
  const addrs = opts.apis.map((a) => parseClientAddress(a, "--api"));
  const stats = emptyStats(addrs.map(formatApiAddress));
  const ac = new AbortController();
  const follower = new BrainFollower(opts, stats, ac.signal);
  opts.onStats?.(stats);
  void follower.follow(addrs);
  await follower.started;
  return { close: () => ac.abort(), globalStats: stats };
}

function emptyStats(apis: readonly string[]): GlobalSourceStats {
  return {
    apis,
    connectedTo: null,
    connects: 0,
    failovers: 0,
    failures: {},
    refused: 0,
    changeSets: 0,
    ops: 0,
    events: 0,
    unchanged: 0,
    lastChangeSetMs: 0,
  };
}

/** The agent's brains, followed one at a time into one mirror and one brain. */
class BrainFollower {
  private readonly mirror = new GlobalMirror();
  private readonly ingest: Ingest;
  private readonly log: Logger;
  private readonly firstChangeSet = Promise.withResolvers<void>();
  private followed: string | null = null; // the last brain that delivered

  constructor(
    private readonly opts: GlobalSourceOptions,
    private readonly stats: GlobalSourceStats,
    private readonly signal: AbortSignal,
  ) {
    this.ingest = new Ingest(opts.brain, { type: "at-once" });
    this.log = opts.log;
  }

  /** resolves once the first change set is in the brain */
  get started(): Promise<void> {
    return this.firstChangeSet.promise;
  }

  /** Each brain in turn, the next one at once after a stream that worked; backs off once every brain failed in a row. */
  async follow(addrs: readonly ApiAddress[]): Promise<void> {
    const { opts, stats } = this;
    const retryMs = opts.retryMs ?? 200;
    const maxRetryMs = opts.maxRetryMs ?? 5000;
    let failedInARow = 0;
    for (let i = 0; !this.signal.aborted; i = (i + 1) % addrs.length) {
      const where = stats.apis[i];
      let delivered = false;
      try {
        const conn = connectGrpc(addrs[i], { keepaliveMs: opts.keepaliveMs ?? 3000, ...clientCredentials(opts.security) });
        delivered = await this.followOne(where, conn);
        conn.close();
      } catch (err) {
        // A credential file gone or broken since start-up: this brain cannot be tried now; the rules stay as they are.
        this.failed(where);
        this.log.warn("cannot connect to the brain", { api: where, error: errorMessage(err) });
      }
      failedInARow = delivered ? 0 : failedInARow + 1;
      // A stream that worked: the next brain at once. Every brain failed in a row: back off.
      if (failedInARow >= addrs.length) await sleep(Math.min(maxRetryMs, retryMs * 2 ** (failedInARow - addrs.length)), this.signal);
    }
  }

  /**
   * Follows one brain until its stream ends; ops go into the mirror as they
   * arrive, each Sync commits. Returns whether a change set was delivered.
   */
  private async followOne(where: string, conn: GrpcConnection): Promise<boolean> {
    let delivered = false;
    const onOp = streamOps(this.mirror, {
      onBad: (error) => this.log.warn("skipping invalid global item", { api: where, error }),
      onSync: () => {
        const { events, unchanged } = commit(this.mirror, this.ingest, this.stats);
        if (delivered) return;
        delivered = true;
        this.delivering(where, events, unchanged);
      },
    });
    let error = "the brain ended the stream";
    // Not `for await`: Bun keeps an idle loop's last value alive.
    const chunks = globalOpChunks(conn, this.signal);
    try {
      for (;;) {
        const r = await chunks.next();
        if (r.done) break;
        for (const op of r.value) onOp(op);
        r.value.length = 0; // the generator keeps its last chunk while it waits for the next
      }
    } catch (err) {
      error = errorMessage(err);
      if (isRefusal(err)) this.stats.refused++;
    } finally {
      void chunks.return(undefined);
      this.stats.connectedTo = null;
    }
    if (this.signal.aborted) return delivered;
    this.failed(where);
    this.log.warn("global stream failed, trying the next brain", { api: where, error });
    return delivered;
  }

  /** A stream's first change set is in: `where` is the brain followed now (a failover when another one was before). */
  private delivering(where: string, events: number, unchanged: number): void {
    const { stats } = this;
    stats.connectedTo = where;
    stats.connects++;
    if (this.followed !== null && this.followed !== where) stats.failovers++;
    this.followed = where;
    this.log.info("following brain", { api: where, resync: stats.connects > 1, changed: events, unchanged });
    this.firstChangeSet.resolve();
  }

  private failed(where: string): void {
    this.stats.failures[where] = (this.stats.failures[where] ?? 0) + 1;
  }
}

/**
 * One stream's ops into the mirror, a change set at a time: each Sync ends
 * one. kpng clients honour Reset only as a stream's first op.
 */
function streamOps(mirror: GlobalMirror, on: { onBad: (error: string) => void; onSync: () => void }): (op: WireOp) => void {
  let first = true;
  let reset = false;
  let open = false;
  return (op) => {
    if (op.op === "reset") {
      reset ||= first && !open;
      return;
    }
    if (!open) mirror.begin(reset);
    open = op.op !== "sync";
    if (open) {
      mirror.op(op, on.onBad);
      return;
    }
    on.onSync();
    reset = first = false;
  };
}
