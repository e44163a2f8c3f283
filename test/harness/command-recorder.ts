// An Executor that records commands instead of running them, so tests and
// benchmarks can assert what a backend would run (IPVS mode's ipvsadm, ip and
// iptables commands). Canned answers stand in for reads. It lives under test/
// as the nft and iptables recorders do: kpng itself never runs it (IPVS
// mode's --dry-run prints through executor.ts). The winkernel fake HNS stays
// in plugins/winkernel/: the product runs it (--dry-run, and off Windows).

import { type Executor, KpngError } from "../../src/host/toolkit/index.ts";

export interface RecordedCommand {
  argv: string[];
  stdin?: string;
}

export interface RecorderOptions {
  /** answer for a command (first match wins); return undefined to fall through */
  answer?: (argv: readonly string[]) => string | undefined;
  /** make a command fail (e.g. `iptables -C` for a jump that is not there yet) */
  fail?: (argv: readonly string[]) => boolean;
}

export interface Recorder extends Executor {
  readonly commands: RecordedCommand[];
  /** commands whose argv starts with these words */
  find(...words: string[]): RecordedCommand[];
  /** stdin of the commands whose argv starts with these words, concatenated */
  input(...words: string[]): string;
  clear(): void;
}

export function recorder(opts: RecorderOptions = {}): Recorder {
  const commands: RecordedCommand[] = [];
  const starts = (argv: string[], words: string[]) => words.every((w, i) => argv[i] === w);
  return {
    commands,
    async run(argv, stdin) {
      commands.push(stdin === undefined ? { argv: [...argv] } : { argv: [...argv], stdin });
      if (opts.fail?.(argv)) throw new KpngError("internal", `recorded failure: ${argv.join(" ")}`);
      return opts.answer?.(argv) ?? "";
    },
    find: (...words) => commands.filter((c) => starts(c.argv, words)),
    input: (...words) =>
      commands
        .filter((c) => starts(c.argv, words))
        .map((c) => c.stdin ?? "")
        .join(""),
    clear: () => void commands.splice(0),
  };
}
