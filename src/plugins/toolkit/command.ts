// Running a program (iptables-restore, ipset, ipvsadm, ip, ...): the one way
// backends do it, so that "the program is not there" reads the same in every
// backend and is never mistaken for a refused input.

import { errorMessage, KpngError } from "../../core/errors.ts";

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs argv to its end, stdin fed whole; a program that cannot be started at all is `unavailable`. */
export async function runCommand(argv: readonly string[], stdin?: string): Promise<CommandResult> {
  const p = start(argv, stdin);
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, stdout, stderr };
}

function start(argv: readonly string[], stdin: string | undefined) {
  try {
    return Bun.spawn([...argv], {
      stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
      stdout: "pipe",
      stderr: "pipe",
    });
  } catch (err) {
    throw new KpngError("unavailable", `${argv[0]}: cannot run (${errorMessage(err).replace(/\s+/g, " ").trim()})`);
  }
}
