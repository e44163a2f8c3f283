// Runs kpng as a separate process (from source, or the compiled dist/kpng)
// and watches its output, for tests of the API across processes.

import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { ApiAddress } from "../../src/core/api/server/address.ts";
import { parseApiAddress } from "../../src/core/api/server/address.ts";

export const ROOT = resolve(import.meta.dir, "../..");
export const BUN = join(ROOT, "node_modules/.bin/bun");
export const BUF = join(ROOT, "node_modules/.bin/buf");

/**
 * How long a whole-process test waits for something kpng does (a sync, a log
 * line, rules in the kernel) before it calls it a hang. Not a performance
 * target (the benches and the logged figures are): a bound a loaded 2-core
 * machine meets. Issue 38: at load 5-9 a kill -9 and restart that lost no
 * connection outran its test's own 20 s, and failed the suite; at load 17-28
 * (`bun run bench startup` looping beside the suite and other builds) kpng
 * took up to 33 s to report a broken edit of a 2,100-service input file.
 */
export const LOADED_WAIT_MS = 60_000;

/*
 * A whole-process test's own timeout leaves room for its loaded waits and
 * the steps between them: 90_000 for one, 150_000 for two (30 s + 60 s a
 * wait). A hang then fails on the wait that names what it awaited, with
 * kpng's output, rather than on bun's bare timeout, and a test does not
 * outlive its timeout to run on beside the next one. Written as numbers in
 * the tests: the formatter keeps a test's body in place only for a literal.
 */

/** `bun src/main.ts`, or the compiled binary when KPNG_BIN names it. */
export const kpngCommand = (bin = process.env.KPNG_BIN): string[] => (bin ? [bin] : [BUN, join(ROOT, "src/main.ts")]);

/** `bun src/main.ts ARGS` run to its end, synchronously: exit code and output (`env` added to the test's) */
export function kpngSync(args: string[], env?: Record<string, string>): { code: number; out: string; err: string } {
  const r = Bun.spawnSync([process.execPath, join(ROOT, "src/main.ts"), ...args], {
    cwd: ROOT,
    ...(env && { env: { ...process.env, ...env } }),
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

/** node-1 of the example cluster (examples/cluster.yaml, a path from ROOT, the tests' cwd) as the cluster source */
export const EXAMPLE_NODE_1 = ["--input", "examples/cluster.yaml", "--node-name", "node-1"];

/** kpng's health and metrics servers on free loopback ports, so that processes run side by side */
export const FREE_PORTS = ["--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0"];

/** a node agent's flags: node `node`, the nft backend in dry-run, its servers on free loopback ports (metrics on `metrics`) */
export const nftDryRun = (node: string, metrics = "127.0.0.1:0"): string[] => [
  "--node-name",
  node,
  "--backend",
  "nft",
  "--dry-run",
  "--healthz-bind-address",
  "127.0.0.1:0",
  "--metrics-bind-address",
  metrics,
];

export interface KpngProcess {
  readonly proc: Bun.Subprocess<"ignore" | "pipe", "pipe", "pipe">;
  /** output so far, line by line */
  readonly stdout: string[];
  readonly stderr: string[];
  /** resolves with the first line (of stdout or stderr) matching `re`, old or new */
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>;
  /** resolves when `n` stdout lines match `re` */
  waitForCount(re: RegExp, n: number, timeoutMs?: number): Promise<string[]>;
  stop(signal?: NodeJS.Signals): Promise<number>;
}

/** `wrap` goes in front of the command, e.g. `ip netns exec NS` (which execs kpng: the pid is kpng's). */
export function startKpng(
  args: string[],
  opts: { bin?: string; env?: Record<string, string>; stdin?: "pipe" | "ignore"; wrap?: string[] } = {},
): KpngProcess {
  const proc = Bun.spawn([...(opts.wrap ?? []), ...kpngCommand(opts.bin), ...args], {
    cwd: ROOT,
    stdin: opts.stdin ?? "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, ...opts.env },
  });
  const stdout: string[] = [];
  const stderr: string[] = [];
  let notify: () => void = () => {};
  const pump = async (stream: ReadableStream<Uint8Array>, into: string[]) => {
    let rest = "";
    const dec = new TextDecoder();
    for await (const chunk of stream) {
      const lines = (rest + dec.decode(chunk, { stream: true })).split("\n");
      rest = lines.pop()!;
      into.push(...lines);
      notify();
    }
    if (rest) into.push(rest);
    notify();
  };
  void pump(proc.stdout, stdout);
  void pump(proc.stderr, stderr);
  let exited = false;
  void proc.exited.then(() => {
    exited = true;
    notify();
  });
  const until = async <T>(check: () => T | undefined, what: string, timeoutMs: number): Promise<T> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = check();
      if (v !== undefined) return v;
      if (exited) await Bun.sleep(20); // let the pumps drain
      const v2 = check();
      if (v2 !== undefined) return v2;
      if (exited) throw new Error(`kpng exited (${proc.exitCode}) before ${what}\nstderr:\n${stderr.join("\n")}`);
      if (Date.now() > deadline)
        throw new Error(`timeout waiting for ${what}\nstdout:\n${stdout.slice(-20).join("\n")}\nstderr:\n${stderr.slice(-20).join("\n")}`);
      await new Promise<void>((r) => {
        notify = r;
        setTimeout(r, 50);
      });
    }
  };
  return {
    proc: proc as KpngProcess["proc"],
    stdout,
    stderr,
    waitFor: (re, timeoutMs = LOADED_WAIT_MS) => until(() => [...stdout, ...stderr].find((l) => re.test(l)), String(re), timeoutMs),
    waitForCount: (re, n, timeoutMs = LOADED_WAIT_MS) =>
      until(
        () => {
          const m = stdout.filter((l) => re.test(l));
          return m.length >= n ? m : undefined;
        },
        `${n} lines matching ${re}`,
        timeoutMs,
      ),
    async stop(signal = "SIGTERM") {
      if (!exited) proc.kill(signal);
      return proc.exited;
    },
  };
}

/** `kpng serve`, resolved once it serves; `addresses` as bound (tcp port 0 resolved). */
export async function startServe(args: string[], opts: { bin?: string } = {}): Promise<KpngProcess & { addresses: ApiAddress[] }> {
  const p = startKpng(["serve", ...args], opts);
  const line = await p.waitFor(/serving the API/);
  const listen = /listen=(\S+)/.exec(line)![1];
  return Object.assign(p, { addresses: listen.split(",").map((a) => parseApiAddress(a)) });
}

/**
 * A temporary directory: the name is chosen now, the directory made by
 * create() (in beforeAll), so suites that a filter skips leave nothing behind.
 */
export function tempDir(prefix = "kpng-api-"): { path: string; create(): string; remove(): void } {
  const path = join(tmpdir(), `${prefix}${process.pid}-${randomBytes(4).toString("hex")}`);
  return {
    path,
    create: () => (mkdirSync(path, { recursive: true, mode: 0o700 }), path),
    remove: () => rmSync(path, { recursive: true, force: true }),
  };
}

/**
 * The number of lines once no new one came for 200 ms. A process's stdout and
 * stderr are two pipes: a log line can arrive before output written ahead of it.
 */
export async function settled(lines: string[]): Promise<number> {
  for (let n = -1; n !== lines.length; ) {
    n = lines.length;
    await Bun.sleep(200);
  }
  return lines.length;
}
