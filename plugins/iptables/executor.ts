// The thin executor: the only code of this backend that runs iptables
// programs. Everything goes through an `Executor` (run argv with stdin), so a
// test swaps in `recordingExecutor` or a namespace-bound executor.

import { type Executor, type Family, KpngError, type RunOptions, runCommand, type StdinChunk } from "../../src/host/toolkit/index.ts";
import { ipsetCommand, iptablesCommand, restoreCommand, saveCommand, type Table } from "./names.ts";

/**
 * The last line of every restore input: a comment, which iptables-restore
 * reads only once every COMMIT before it succeeded, and echoes with `-v`
 * (flushed at once, nf_tables and legacy flavours alike). The restore is done
 * when it prints it: iptables-nft then closes its netlink socket, and closing
 * one waits for the kernel to free the rules the commit replaced (an RCU
 * grace period, nf_tables_trans_destroy_flush_work), milliseconds that no
 * longer hold up the sync (see docs/backends/iptables.md).
 */
export const restoredMarker = "# kpng: restored";

export interface IptablesExecutor {
  /**
   * `iptables-restore --noflush` (or ip6tables-restore) with this input, whole
   * or streamed (Executor.stream; a promised chunk is written once it resolves,
   * so a restore can start before all its input is known). Settles when the
   * restore echoes restoredMarker, or at its exit. `toExit`: at its exit only,
   * by when the kernel has freed the rules the restore deleted (an ipset one of
   * them matched is released, and can be destroyed).
   */
  restore(family: Family, input: string | Iterable<StdinChunk>, opts?: { toExit?: boolean }): Promise<void>;
  /** `iptables-save`: every table */
  save(family: Family): Promise<string>;
  chainExists(family: Family, table: Table, chain: string): Promise<boolean>;
  /** `ipset restore` with this input (the hairpin sets), whole or streamed (as `restore`'s) */
  ipset(input: string | Iterable<StdinChunk>): Promise<void>;
}

export function iptablesExecutor(exec: Executor): IptablesExecutor {
  return {
    async restore(family, input, opts = {}) {
      // -w: wait for the xtables lock held by another legacy-iptables user instead of failing; -v: echo the marker.
      const argv = [restoreCommand(family), "--noflush", "-w", "5", "-v"];
      const done = opts.toExit ? {} : { doneAt: restoredMarker };
      const marker = `${restoredMarker}\n`;
      if (typeof input === "string") await exec.run(argv, input + marker, done);
      else if (exec.stream) await exec.stream(argv, marked(input, marker), done);
      else await exec.run(argv, (await Promise.all([...input])).join("") + marker, done);
    },
    save: (family) => exec.run([saveCommand(family)]),
    async ipset(input) {
      const argv = [ipsetCommand, "restore"];
      if (typeof input === "string") await exec.run(argv, input);
      else if (exec.stream) await exec.stream(argv, input);
      else await exec.run(argv, (await Promise.all([...input])).join(""));
    },
    async chainExists(family, table, chain) {
      try {
        await exec.run([iptablesCommand(family), "-w", "5", "-t", table, "-S", chain]);
        return true;
      } catch {
        return false;
      }
    },
  };
}

function* marked(input: Iterable<StdinChunk>, marker: string): Generator<StdinChunk> {
  yield* input;
  yield marker;
}

/**
 * Runs programs on this host; throws with argv and stderr when the exit code
 * is not 0. `prefix` goes in front of every argv (e.g. `ip netns exec NS`).
 */
export function spawnExecutor(prefix: readonly string[] = []): Required<Executor> {
  const run = async (command: string[], stdin?: string | Iterable<StdinChunk>, opts?: RunOptions) => {
    const argv = [...prefix, ...command];
    const { code, stdout, stderr } = await runCommand(argv, stdin, opts);
    if (code !== 0) throw new KpngError("internal", `${argv.join(" ")}: exit ${code}: ${stderr.trim()}`);
    return stdout;
  };
  return { run, stream: run };
}

export interface RecordedCall {
  argv: string[];
  /** as given, but a restore's without its last line (restoredMarker) */
  stdin?: string;
  /** the line the caller settles at (RunOptions.doneAt), if any */
  doneAt?: string;
}

/**
 * The fake beside the real thing: records every call and answers with
 * `reply` (default: empty output). `reply` may throw to simulate a failure.
 */
export function recordingExecutor(reply: (call: RecordedCall) => string = () => "") {
  const calls: RecordedCall[] = [];
  const executor: Executor & { calls: RecordedCall[]; restores(family?: Family): string[] } = {
    calls,
    async run(argv, stdin, opts) {
      const call = {
        argv,
        stdin: stdin?.endsWith(`\n${restoredMarker}\n`) ? stdin.slice(0, -restoredMarker.length - 1) : stdin,
        doneAt: opts?.doneAt,
      };
      calls.push(call);
      return reply(call);
    },
    restores: (family) =>
      calls
        .filter((c) => c.argv[0] === (family ? restoreCommand(family) : c.argv[0]) && c.argv[0].endsWith("-restore"))
        .map((c) => c.stdin ?? ""),
  };
  return executor;
}
