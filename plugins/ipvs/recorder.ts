// An Executor that records commands instead of running them, shipped beside
// the real one (knftables' fake style) so tests and benchmarks of any caller
// can assert what IPVS mode would run. Canned answers stand in for reads.

import { type Executor, KpngError } from "../../src/plugins/toolkit/index.ts";

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
