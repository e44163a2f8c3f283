// Running a program (iptables-restore, ipset, ipvsadm, ip, ...): the one way
// backends do it, so that "the program is not there" reads the same in every
// backend and is never mistaken for a refused input.

import { errorMessage, KpngError } from "../../core/errors.ts";

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs argv to its end; a program that cannot be started at all is
 * `unavailable`. `stdin` is fed whole, or written as an iterable yields its
 * chunks: each is made when the program has taken the one before, so a
 * program that reads as it goes (iptables-restore) works while the caller
 * still produces. A chunk that throws ends stdin there and is what this throws.
 */
export async function runCommand(argv: readonly string[], stdin?: string | Iterable<string>): Promise<CommandResult> {
  let failed: { err: unknown } | undefined;
  const p = start(argv, typeof stdin === "string" || stdin === undefined ? stdin : pulled(stdin, (err) => (failed = { err })));
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (failed) throw failed.err;
  return { code, stdout, stderr };
}

/**
 * Waits for every job (programs run side by side), then throws the first
 * failure in `jobs`' order: none is still running when the caller goes on,
 * to a retry say, even when one failed early.
 */
export async function allDone(jobs: readonly Promise<unknown>[]): Promise<void> {
  for (const r of await Promise.allSettled(jobs)) if (r.status === "rejected") throw r.reason;
}

/** The chunks as a stream read one at a time, when the reader wants the next (no read-ahead). */
function pulled(chunks: Iterable<string>, onError: (err: unknown) => void): ReadableStream<Uint8Array> {
  const it = chunks[Symbol.iterator]();
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        try {
          const r = it.next();
          if (r.done) controller.close();
          else controller.enqueue(encoder.encode(r.value));
        } catch (err) {
          onError(err);
          controller.error(err);
        }
      },
    },
    { highWaterMark: 0 },
  );
}

function start(argv: readonly string[], stdin: string | ReadableStream<Uint8Array> | undefined) {
  try {
    return Bun.spawn([...argv], {
      stdin: stdin === undefined ? "ignore" : typeof stdin === "string" ? new TextEncoder().encode(stdin) : stdin,
      stdout: "pipe",
      stderr: "pipe",
    });
  } catch (err) {
    throw new KpngError("unavailable", `${argv[0]}: cannot run (${errorMessage(err).replace(/\s+/g, " ").trim()})`);
  }
}
