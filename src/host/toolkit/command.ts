// Running a program (iptables-restore, ipset, ipvsadm, ip, ...): the one way
// backends do it, so that "the program is not there" reads the same in every
// backend and is never mistaken for a refused input.

import { errorMessage, KpngError } from "../../core/errors.ts";

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** A chunk of streamed stdin: text, or text that is not known yet (written once it is). */
export type StdinChunk = string | Promise<string>;

export interface RunOptions {
  /**
   * Settle as soon as the program prints this line on stdout, as exit code 0
   * with what it printed so far, instead of at its exit: for a program whose
   * work is done before a slow exit. The program still runs to its end
   * (its output read and dropped). Without the line, the exit settles as usual.
   */
  doneAt?: string;
}

/**
 * Runs argv to its end; a program that cannot be started at all is
 * `unavailable`. `stdin` is fed whole, or written as an iterable yields its
 * chunks: each is made when the program has taken the one before, so a
 * program that reads as it goes (iptables-restore) works while the caller
 * still produces; a chunk that is a promise is written once it resolves. A
 * chunk that throws (or rejects) ends stdin there and is what this throws.
 */
export async function runCommand(
  argv: readonly string[],
  stdin?: string | Iterable<StdinChunk>,
  opts: RunOptions = {},
): Promise<CommandResult> {
  let failed: { err: unknown } | undefined;
  const p = start(argv, typeof stdin === "string" || stdin === undefined ? stdin : pulled(stdin, (err) => (failed = { err })));
  const stderr = new Response(p.stderr).text();
  const stdout = opts.doneAt === undefined ? new Response(p.stdout).text() : untilLine(p.stdout, opts.doneAt);
  const out = await stdout;
  if (typeof out !== "string") {
    void stderr.catch(() => {});
    return { code: 0, stdout: out.seen, stderr: "" };
  }
  const [err, code] = await Promise.all([stderr, p.exited]);
  if (failed) throw failed.err;
  return { code, stdout: out, stderr: err };
}

/**
 * Waits for every job (programs run side by side), then throws the first
 * failure in `jobs`' order: none is still running when the caller goes on,
 * to a retry say, even when one failed early.
 */
export async function allDone(jobs: readonly Promise<unknown>[]): Promise<void> {
  for (const r of await Promise.allSettled(jobs)) if (r.status === "rejected") throw r.reason;
}

/**
 * All of `stream`, or `{ seen }` (the text up to and with `line`) as soon as
 * a line equal to `line` is read; the rest is then read and dropped, so the
 * program never blocks on a full pipe. Each chunk is searched with the tail
 * of the text before it, never the whole text again (a listing can be MBs).
 */
async function untilLine(stream: ReadableStream<Uint8Array>, line: string): Promise<string | { seen: string }> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const wanted = `\n${line}\n`;
  const parts: string[] = [];
  // what precedes the next chunk, as far as a match can reach back; "\n" at the start: a first line counts
  let tail = "\n";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return parts.join("") + decoder.decode();
    const chunk = decoder.decode(value, { stream: true });
    parts.push(chunk);
    const window = tail + chunk;
    const at = window.indexOf(wanted);
    if (at < 0) {
      tail = window.slice(-wanted.length);
      continue;
    }
    void (async () => {
      while (!(await reader.read()).done);
    })().catch(() => {});
    const text = parts.join("");
    return { seen: text.slice(0, text.length - (window.length - at - wanted.length)) };
  }
}

/** The chunks as a stream read one at a time, when the reader wants the next (no read-ahead). */
function pulled(chunks: Iterable<StdinChunk>, onError: (err: unknown) => void): ReadableStream<Uint8Array> {
  const it = chunks[Symbol.iterator]();
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const r = it.next();
          if (r.done) controller.close();
          else controller.enqueue(encoder.encode(typeof r.value === "string" ? r.value : await r.value));
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
