// The only code of the nft backend that reaches the kernel: it hands a
// printed transaction to `nft -f -` (one atomic batch) through an Executor,
// or, for small partial syncs, to a running `nft -i` (session.ts) through a
// Spawner. Tests replace both with recorders and fakes or point them into a
// network namespace.

import { spawn } from "node:child_process";
import { isUnavailable, KpngError } from "../../src/core/errors.ts";
import type { Logger } from "../../src/core/log.ts";
import type { Executor } from "../../src/plugins/backend.ts";
import type { NftSession, Spawner } from "./session.ts";
import type { Transaction } from "./transaction.ts";

/** Runs real programs. Fails with the program's stderr, so callers can see "0 flow entries" and the like. */
export function processExecutor(): Executor {
  return {
    run: (argv, stdin) =>
      new Promise((resolve, reject) => {
        const p = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
        let out = "";
        let err = "";
        p.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
        p.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
        p.on("error", (e) => reject(new KpngError("unavailable", `${argv[0]}: ${e.message}`)));
        p.on("close", (code) =>
          code === 0 ? resolve(out) : reject(new KpngError("internal", `${argv.join(" ")}: exit ${code}: ${err.trim()}`)),
        );
        p.stdin.on("error", () => {}); // the close handler reports the failure
        p.stdin.end(stdin ?? "");
      }),
  };
}

/** Starts real long-lived programs, after `prefix` (e.g. `ip netns exec NS`). */
export function processSpawner(prefix: string[] = []): Spawner {
  return {
    spawn(argv, on, env) {
      const [cmd, ...args] = [...prefix, ...argv];
      // stdout is not read: nft -i prints nothing there for add/delete/flush
      const p = spawn(cmd, args, { stdio: ["pipe", "ignore", "pipe"], env: { ...process.env, ...env } });
      p.stderr.setEncoding("utf8").on("data", (d: string) => on.stderr(d));
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
 * Transactions above this size go to `nft -f -`: `nft -i` reads its input
 * one byte at a time (a system call each, ~1 µs), which outweighs a new
 * process from about this size on.
 */
export const SESSION_MAX_BYTES = 16 * 1024;

export class NftRunner {
  private gaveUp = false;

  constructor(
    private readonly exec: Executor,
    private readonly session?: NftSession,
    private readonly log?: Logger,
  ) {}

  /**
   * Applies the transaction atomically; a transaction that failed validation
   * is never sent. Full syncs and big transactions run as `nft -f -`, small
   * partial ones through the session when there is one.
   */
  async apply(tx: Transaction, opts: { full?: boolean } = {}): Promise<void> {
    if (tx.err) throw new KpngError("internal", `nft transaction not applied: ${tx.err}`);
    if (tx.empty) return;
    if (this.session && !opts.full && this.sessionUsable()) {
      const line = tx.printLine();
      if (line.length <= SESSION_MAX_BYTES)
        try {
          return await this.session.apply(line);
        } catch (err) {
          // nothing was sent: the same transaction as a one-shot
          if (!isUnavailable(err)) throw err;
        }
    }
    await this.exec.run(["nft", "-f", "-"], tx.print());
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
    this.session?.close();
  }

  private sessionUsable(): boolean {
    if (this.session?.usable) return true;
    if (!this.gaveUp) this.log?.warn("nft -i keeps failing: partial syncs run as nft -f - from now on");
    this.gaveUp = true;
    return false;
  }
}
