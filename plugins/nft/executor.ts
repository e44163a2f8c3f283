// The only code of the nft backend that reaches the kernel: it hands a
// printed transaction to `nft -f -` (one atomic batch) through an Executor,
// which tests replace with a recorder or point into a network namespace.

import { spawn } from "node:child_process";
import { KpngError } from "../../src/core/errors.ts";
import type { Executor } from "../../src/plugins/backend.ts";
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

export class NftRunner {
  constructor(private readonly exec: Executor) {}

  /** applies the transaction atomically; a transaction that failed validation is never sent */
  async apply(tx: Transaction): Promise<void> {
    if (tx.err) throw new KpngError("internal", `nft transaction not applied: ${tx.err}`);
    if (tx.empty) return;
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
}
