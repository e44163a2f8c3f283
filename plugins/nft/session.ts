// A long-lived `nft -i` for partial syncs. Every `nft -f -` starts a
// process and fetches nft's cache before its first statement; an interactive
// nft is already running, so a small change costs a fraction of a fresh
// `nft -f -` (bench nft-input and bench nft print both). What this relies on (nft 1.0.6, each point checked against the
// kernel in test/nft/session-real.test.ts):
//
// - One input line is one transaction: statements joined with "; " (or in
//   one included file) are committed together or not at all.
// - nft reports errors on stderr and nothing else for add/delete/flush.
// - Nothing says when a line is done, so each line is followed by a marker
//   that is no command (`kpng-sync-<nonce>-<n>`): nft answers it at once with
//   a syntax error that echoes it, without asking the kernel anything, after
//   whatever the transaction printed. stderr before the marker's error is the
//   transaction's.
// - The cache is never stale: before each command nft compares the
//   ruleset's generation id with its cache's, and refetches after any
//   commit, its own or another process's (full syncs run as `nft -f -`).
// - Input is read one byte at a time (libedit), so a
//   transaction over INLINE_MAX_BYTES goes as a file: written to a private
//   directory (/run/kpng-nft, 0700) and sent as the line
//   `include "<file>"`, which nft reads buffered; the file is removed once
//   answered. The included statements are still that line's one
//   transaction (a refused one takes back the whole file), and errors in it
//   come before the marker's, prefixed "In file included from". A wave of
//   endpoint changes costs less as a file than as a line, and either far
//   less than a new `nft -f -` (bench/nft-input.bench.ts prints the three).
// - Every line stays in nft's in-memory history, written at exit to
//   $HOME/.nft.history (read back at start): HOME is /dev/null for the
//   process, and it is replaced after `maxInputBytes`, before it grows big.
//
// Any failure ends the process; the next transaction starts a new one. (But
// for a file nft cannot find, e.g. in another mount namespace: nothing was
// applied, and that transaction and all after it go as lines.)

import { accessSync, constants, lstatSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KpngError } from "../../src/host/toolkit/index.ts";

/** a running program: what NftSession needs of it */
export interface Channel {
  write(text: string): void;
  /** ends stdin and stops the program */
  kill(): void;
}

export interface SpawnHandlers {
  stderr(text: string): void;
  /** stdout is read only when this is given (`nft monitor` prints there; `nft -i` prints nothing for add/delete/flush) */
  stdout?(text: string): void;
  exit(code: number | null): void;
}

/** starts programs for NftSession and RulesWatch; tests replace it with a fake nft */
export interface Spawner {
  spawn(argv: string[], on: SpawnHandlers, env?: Record<string, string>): Channel;
}

export interface SessionOptions {
  /** the interactive nft, e.g. `["nft", "-i"]` */
  argv?: string[];
  /** a line without its marker's answer by then is given up (the process is killed) */
  timeoutMs?: number;
  /** after this many failures in a row the session is not tried again */
  maxFailures?: number;
  /** input after which the process is replaced (nft keeps every line in memory); a file's bytes count too */
  maxInputBytes?: number;
  /** transactions longer than this go through a file (`include`); Infinity: always one line */
  inlineMaxBytes?: number;
  /** where the private directory `kpng-nft` for those files is (default /run, else the system's temporary directory) */
  fileDir?: string;
}

/** nft -i reads and writes its command history in $HOME: never in a real home */
const NO_HISTORY = { HOME: "/dev/null" };

/** one running `nft -i` and what it said since the last marker */
class Live {
  stderr = "";
  exited = false;
  /** bytes written to stdin */
  input = 0;
  /** called when stderr grows or the process ends */
  wake: (() => void) | undefined;
  readonly channel: Channel;

  constructor(spawner: Spawner, argv: string[]) {
    this.channel = spawner.spawn(
      argv,
      {
        stderr: (t) => {
          this.stderr += t;
          this.wake?.();
        },
        exit: () => {
          this.exited = true;
          this.wake?.();
        },
      },
      NO_HISTORY,
    );
  }
}

export class NftSession {
  private live: Live | undefined;
  private readonly nonce = Math.random().toString(36).slice(2, 10);
  private seq = 0;
  private failures = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly argv: string[];
  private readonly timeoutMs: number;
  private readonly maxFailures: number;
  private readonly maxInputBytes: number;
  private readonly inlineMaxBytes: number;
  private readonly fileDir: string | undefined;
  /** making the directory or writing there failed: lines only from then on */
  private noFiles = false;
  /** the private directory for transactions sent as files, once checked */
  private dir: string | undefined;

  constructor(
    private readonly spawner: Spawner,
    opts: SessionOptions = {},
  ) {
    this.argv = opts.argv ?? ["nft", "-i"];
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.maxFailures = opts.maxFailures ?? 3;
    this.maxInputBytes = opts.maxInputBytes ?? 4 << 20;
    this.inlineMaxBytes = opts.inlineMaxBytes ?? INLINE_MAX_BYTES;
    this.fileDir = opts.fileDir;
  }

  /** false once the session failed too often: callers use `nft -f -` instead */
  get usable(): boolean {
    return this.failures < this.maxFailures;
  }

  /**
   * Runs one transaction: one statement a line (an `nft -f` script; lines
   * starting with # are comments) or joined with "; ". Fails with
   * `unavailable` when nothing was sent (no process could be started), else
   * with `internal` and nft's message: the transaction was refused, or the
   * process died or hung and whether it committed is unknown.
   */
  apply(script: string): Promise<void> {
    const run = this.queue.then(() => this.send(script));
    this.queue = run.catch(() => {});
    return run;
  }

  close() {
    this.live?.channel.kill();
    this.live = undefined;
  }

  private start(): Live {
    try {
      return new Live(this.spawner, this.argv);
    } catch (err) {
      this.failures++;
      throw new KpngError("unavailable", `${this.argv.join(" ")}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private async send(script: string): Promise<void> {
    if (!this.usable) throw new KpngError("unavailable", `${this.argv.join(" ")}: given up after ${this.failures} failures`);
    if (this.live?.exited) this.live = undefined;
    if (this.live && this.live.input > this.maxInputBytes) this.replace();
    const live = (this.live ??= this.start());
    const seq = ++this.seq;
    const marker = `kpng-sync-${this.nonce}-${seq}`;
    const file = script.length > this.inlineMaxBytes ? this.write(seq, script) : undefined;
    const text = `${file ? `include "${file}"` : oneLine(script)}\n${marker}\n`;
    live.stderr = "";
    live.input += text.length + (file ? script.length : 0);
    live.channel.write(text);
    let out: string;
    try {
      out = await this.answer(live, marker);
    } catch (err) {
      this.fail(live);
      throw err;
    } finally {
      // read by now, or never to be read: a killed nft took its input with it
      if (file) rmSync(file, { force: true });
    }
    if (file && (out.includes(`File not found: ${file}`) || out.includes(`Could not open file "${file}"`))) {
      // nft does not see or may not read kpng's files (another mount namespace, a security module):
      // the include failed, nothing was applied; lines from now on
      this.noFiles = true;
      return this.send(script);
    }
    if (/\bError\b/.test(out)) {
      this.fail(live);
      throw new KpngError("internal", `nft -i: ${out.trim()}`);
    }
    this.failures = 0;
  }

  /** stderr of the transaction: everything before its marker's syntax error */
  private answer(live: Live, marker: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => done(new KpngError("internal", `nft -i: no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
      const done = (err?: Error, out?: string) => {
        clearTimeout(timer);
        live.wake = undefined;
        if (err) reject(err);
        else resolve(out ?? "");
      };
      live.wake = () => {
        const block = findMarker(live.stderr, marker);
        if (block) {
          live.stderr = live.stderr.slice(block.end);
          done(undefined, block.before);
        } else if (live.exited) done(new KpngError("internal", `nft -i exited: ${live.stderr.trim() || "no output"}`));
      };
      live.wake();
    });
  }

  /**
   * Writes the transaction to a new file in the private directory (cheap,
   * removal included): nft reads an included file through a buffer, not byte by byte.
   * Undefined when the directory cannot be made or written (the transaction
   * goes as a line).
   */
  private write(seq: number, script: string): string | undefined {
    if (this.noFiles) return undefined;
    try {
      this.dir ??= privateDir(this.fileDir ?? privateParent());
      // kpng's processes share the directory: each file has its process's and session's names
      const file = join(this.dir, `${process.pid}-${this.nonce}-${seq}.nft`);
      writeFileSync(file, script);
      return file;
    } catch {
      this.noFiles = true;
      return undefined;
    }
  }

  /** a new process for the next transaction; the directory stays */
  private replace() {
    this.live?.channel.kill();
    this.live = undefined;
  }

  private fail(live: Live) {
    this.failures++;
    live.channel.kill();
    if (this.live === live) this.live = undefined;
  }
}

/**
 * Above this many bytes a transaction goes to nft as a file: a file costs a
 * fixed amount (write, open, read, unlink) and a line a little per byte, so
 * past a couple of hundred bytes the file is ahead (bench/nft-input.bench.ts
 * measures both).
 */
export const INLINE_MAX_BYTES = 256;

/**
 * `<parent>/kpng-nft`, made 0700 when missing. One fixed directory, not one
 * per session: a session that is never closed (a killed kpng, a test) leaves
 * nothing behind but a file it was sending, and a directory per session
 * would cost a mkdir each time. The name is predictable, so a directory that is not kpng's alone
 * (another owner, others' permissions, a symlink: made in a shared /tmp by
 * someone else) is refused.
 */
function privateDir(parent: string): string {
  const dir = join(parent, "kpng-nft");
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0)
    throw new Error(`${dir} is not kpng's private directory`);
  return dir;
}

/** /run (root's, usually a tmpfs) when kpng may write there, else the temporary directory */
function privateParent(): string {
  try {
    accessSync("/run", constants.W_OK);
    return "/run";
  } catch {
    return tmpdir();
  }
}

/** an nft script as one line: its statements joined with "; ", comments left out */
export function oneLine(script: string): string {
  return script
    .split("\n")
    .filter((l) => l && !l.startsWith("#"))
    .join("; ");
}

/**
 * Finds the marker's error in nft's stderr: "Error: <message>", the marker
 * line echoed, then a caret line. `before` is what came before it, `end`
 * where its caret line ends; undefined until all three lines are in.
 */
export function findMarker(stderr: string, marker: string): { before: string; end: number } | undefined {
  const at = stderr.indexOf(`\n${marker}\n`);
  if (at < 0) return undefined;
  const caretEnd = stderr.indexOf("\n", at + marker.length + 2);
  if (caretEnd < 0) return undefined;
  const header = stderr.lastIndexOf("\n", at - 1) + 1; // start of the "Error: ..." line
  return { before: stderr.slice(0, header), end: caretEnd + 1 };
}
