// The `nft -i` session without a kernel: a fake nft that answers lines the
// way nft 1.0.6 does (errors on stderr, a syntax error for the marker), so
// the protocol's edge cases (errors told apart from the marker's, output in
// pieces, a dying or silent process, giving up, transactions sent as files)
// are checked in milliseconds. session-real.test.ts checks the same
// assumptions against the real nft.

import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NftRunner, SESSION_MAX_BYTES, processSpawner } from "../../plugins/nft/executor.ts";
import { INLINE_MAX_BYTES, NftSession, findMarker, oneLine, type Spawner } from "../../plugins/nft/session.ts";
import { Transaction } from "../../plugins/nft/transaction.ts";
import { recorder } from "./fixtures.ts";

/**
 * A fake `nft -i`: a line containing "REFUSE" is refused, "DIE" kills the
 * process, "HANG" gets no answer; anything else not starting with a verb is
 * a syntax error (the marker). `include "FILE"` reads FILE as one line
 * (recorded in `lines` as the statements, in `included` as the file and
 * its directory's mode), or says "File not found" (always when `blind` is
 * "not found"; "Could not open file" when it is "cannot open"). stderr is delivered in `chunk`-byte pieces.
 */
function fakeNft(opts: { chunk?: number; blind?: "not found" | "cannot open" } = {}) {
  const lines: string[] = [];
  const included: { file: string; dirMode: number }[] = [];
  const envs: (Record<string, string> | undefined)[] = [];
  let spawns = 0;
  let killed = 0;
  const spawner: Spawner = {
    spawn(_argv, on, env) {
      spawns++;
      envs.push(env);
      let alive = true;
      const say = (text: string) => {
        for (let i = 0; i < text.length; i += opts.chunk ?? text.length) on.stderr(text.slice(i, i + (opts.chunk ?? text.length)));
      };
      return {
        write(text) {
          for (let line of text.split("\n").filter(Boolean)) {
            if (!alive) return;
            const file = /^include "(.*)"$/.exec(line)?.[1];
            if (file && opts.blind === "cannot open") {
              say(`Error: Could not open file "${file}": Permission denied\n\n${line}\n${"^".repeat(line.length)}\n`);
              continue;
            }
            if (file && (opts.blind || !existsSync(file))) {
              say(`Error: File not found: ${file}\n${line}\n${"^".repeat(line.length)}\n`);
              continue;
            }
            if (file) {
              included.push({ file, dirMode: statSync(join(file, "..")).mode & 0o777 });
              line = oneLine(readFileSync(file, "utf8"));
            }
            lines.push(line);
            if (line.includes("HANG")) return;
            if (line.includes("DIE")) {
              alive = false;
              queueMicrotask(() => on.exit(1));
              return;
            }
            if (line.includes("REFUSE")) say(`Error: Could not process rule: No such file or directory\n${line}\n${" ".repeat(10)}^^^^\n`);
            else if (!/^(add|delete|flush) /.test(line))
              say(`Error: syntax error, unexpected newline, expecting string\n${line}\n${" ".repeat(line.length)}^\n`);
          }
        },
        kill() {
          killed++;
          alive = false;
        },
      };
    },
  };
  return { spawner, lines, included, envs, spawned: () => spawns, killed: () => killed };
}

const tx = (...statements: string[]) => {
  const t = new Transaction();
  for (const s of statements) t.add({ kind: "chain", verb: "add", family: "ip", chain: { name: s } });
  return t;
};

describe("nft -i session protocol", () => {
  test("a line is answered when its marker's error arrives, even in 1-byte pieces", async () => {
    const nft = fakeNft({ chunk: 1 });
    const session = new NftSession(nft.spawner);
    await session.apply("add chain ip kpng a; add chain ip kpng b");
    await session.apply("add chain ip kpng c");
    expect(nft.lines.filter((l) => !l.startsWith("kpng-sync-"))).toEqual([
      "add chain ip kpng a; add chain ip kpng b",
      "add chain ip kpng c",
    ]);
    expect(nft.spawned()).toBe(1);
  });

  test("a refused line fails with nft's message, not the marker's, and the next line gets a new process", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner);
    const err = await session.apply("add element ip kpng m { REFUSE }").catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain("No such file or directory");
    expect((err as Error).message).not.toContain("syntax error");
    expect(nft.killed()).toBe(1);
    await session.apply("add chain ip kpng a");
    expect(nft.spawned()).toBe(2);
  });

  test("a process that dies with the line fails it as internal (maybe applied), the next line gets a new process", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner);
    await expect(session.apply("add chain ip kpng DIE")).rejects.toThrow("[internal] nft -i exited");
    await session.apply("add chain ip kpng a");
    expect(nft.spawned()).toBe(2);
  });

  test("a line without an answer is given up after the timeout and its process killed", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { timeoutMs: 30 });
    await expect(session.apply("add chain ip kpng HANG")).rejects.toThrow("no answer within 30 ms");
    expect(nft.killed()).toBe(1);
  });

  test("after maxFailures failures in a row the session is no longer usable; a success resets the count", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { maxFailures: 2 });
    await session.apply("add chain ip kpng REFUSE").catch(() => {});
    await session.apply("add chain ip kpng a");
    await session.apply("add chain ip kpng REFUSE").catch(() => {});
    expect(session.usable).toBe(true);
    await session.apply("add chain ip kpng REFUSE").catch(() => {});
    expect(session.usable).toBe(false);
    await expect(session.apply("add chain ip kpng b")).rejects.toThrow("[unavailable]");
  });

  test("nft -i runs without a history file (HOME=/dev/null)", async () => {
    const nft = fakeNft();
    await new NftSession(nft.spawner).apply("add chain ip kpng a");
    expect(nft.envs).toEqual([{ HOME: "/dev/null" }]);
  });

  test("the process is replaced once it was sent maxInputBytes (nft keeps every line)", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { maxInputBytes: 100 });
    for (let i = 0; i < 6; i++) await session.apply(`add chain ip kpng chain-number-${i}`);
    // each line and its marker are ~60 bytes: a new process every 2 lines
    expect(nft.spawned()).toBe(3);
    expect(nft.killed()).toBe(2);
  });

  test("the real spawner passes the environment on", async () => {
    const seen: string[] = [];
    const done = new Promise<void>((resolve) =>
      processSpawner().spawn(
        ["sh", "-c", 'echo "$HOME" >&2'],
        { stderr: (t) => seen.push(t), exit: () => resolve() },
        { HOME: "/dev/null" },
      ),
    );
    await done;
    expect(seen.join("")).toBe("/dev/null\n");
  });

  test("lines sent together are answered in order", async () => {
    const nft = fakeNft({ chunk: 7 });
    const session = new NftSession(nft.spawner);
    const results = await Promise.allSettled([
      session.apply("add chain ip kpng a"),
      session.apply("add chain ip kpng REFUSE"),
      session.apply("add chain ip kpng b"),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
  });
});

/** parent of the sessions' private directories in these tests */
const scratch = mkdtempSync(join(tmpdir(), "kpng-session-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("nft -i session: big transactions as files", () => {
  const big = (tag = "") => Array.from({ length: 30 }, (_, i) => `add chain ip kpng chain-${tag}number-${i}`).join("\n") + "\n";

  test(`a transaction over ${INLINE_MAX_BYTES} bytes is sent as include of a file in a 0700 directory, removed once answered`, async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { fileDir: scratch });
    await session.apply(big());
    expect(nft.included.map((i) => i.dirMode)).toEqual([0o700]);
    expect(nft.lines[0]).toBe(oneLine(big()));
    expect(existsSync(nft.included[0].file)).toBe(false);
    session.close();
  });

  test("a small transaction stays a line, comments left out", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { fileDir: scratch });
    await session.apply("# a note\nadd chain ip kpng a\nadd chain ip kpng b\n");
    expect(nft.included).toEqual([]);
    expect(nft.lines[0]).toBe("add chain ip kpng a; add chain ip kpng b");
    session.close();
  });

  test("a refused file fails with nft's message and its file is removed too", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { fileDir: scratch });
    await expect(session.apply(big("REFUSE-"))).rejects.toThrow("No such file or directory");
    expect(existsSync(nft.included[0].file)).toBe(false);
    session.close();
  });

  // nft in another mount namespace finds no file kpng writes; one confined by a security module may not open it
  for (const blind of ["not found", "cannot open"] as const)
    test(`a file nft cannot use (${blind}) is sent again as a line, and lines go from then on`, async () => {
      const nft = fakeNft({ blind });
      const session = new NftSession(nft.spawner, { fileDir: scratch });
      await session.apply(big("a-"));
      await session.apply(big("b-"));
      expect(nft.lines.filter((l) => !l.startsWith("kpng-sync-"))).toEqual([oneLine(big("a-")), oneLine(big("b-"))]);
      expect({ spawned: nft.spawned(), usable: session.usable }).toEqual({ spawned: 1, usable: true });
      session.close();
    });

  test("a directory that cannot be made: lines", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { fileDir: join(scratch, "missing", "parent") });
    await session.apply(big());
    expect(nft.included).toEqual([]);
    expect(nft.lines[0]).toBe(oneLine(big()));
  });

  test("nothing is left behind, closed or not, after accepted and refused transactions", async () => {
    const nft = fakeNft();
    const parent = mkdtempSync(join(scratch, "left-"));
    const session = new NftSession(nft.spawner, { fileDir: parent });
    await session.apply(big());
    await session.apply(big("REFUSE-")).catch(() => {});
    expect({ included: nft.included.length, left: readdirSync(join(parent, "kpng-nft")) }).toEqual({ included: 2, left: [] });
  });

  test("a kpng-nft directory others may enter (made by someone else in a shared /tmp) is not used: lines", async () => {
    const nft = fakeNft();
    const parent = mkdtempSync(join(scratch, "shared-"));
    mkdirSync(join(parent, "kpng-nft"), { mode: 0o755 });
    chmodSync(join(parent, "kpng-nft"), 0o755);
    const session = new NftSession(nft.spawner, { fileDir: parent });
    await session.apply(big());
    expect({ included: nft.included, line: nft.lines[0] }).toEqual({ included: [], line: oneLine(big()) });
  });

  test("a file's bytes count towards maxInputBytes", async () => {
    const nft = fakeNft();
    const session = new NftSession(nft.spawner, { fileDir: scratch, maxInputBytes: 1500 });
    for (let i = 0; i < 3; i++) await session.apply(big());
    // ~1,000 bytes a file: a new process for every second transaction
    expect(nft.spawned()).toBe(2);
    session.close();
  });
});

describe("findMarker", () => {
  const m = "kpng-sync-x-1";
  const markerError = `Error: syntax error, unexpected newline, expecting string\n${m}\n             ^\n`;
  const cases = [
    { name: "only the marker's error: nothing before it", stderr: markerError, want: { before: "", end: markerError.length } },
    {
      name: "the transaction's error comes first",
      stderr: `Error: Could not process rule: File exists\nadd element ip kpng m { 1 }\n                    ^\n${markerError}`,
      want: { before: "Error: Could not process rule: File exists\nadd element ip kpng m { 1 }\n                    ^\n", end: -1 },
    },
    { name: "caret line not complete yet", stderr: markerError.slice(0, -1), want: undefined },
    { name: "another marker does not count", stderr: markerError.replace(m, `${m}0`), want: undefined },
  ];
  for (const c of cases)
    test(c.name, () => {
      const got = findMarker(c.stderr, m);
      if (c.want?.end === -1) expect(got).toEqual({ before: c.want.before, end: c.stderr.length });
      else expect(got).toEqual(c.want);
    });
});

describe("nft runner: session or nft -f -", () => {
  const big = () => tx(...Array.from({ length: 25_000 }, (_, i) => `chain-with-a-long-name-number-${i}`));
  const cases = [
    { name: "a small partial sync goes to the session", tx: () => tx("a", "b"), full: false, oneShot: 0, session: 1 },
    { name: "a full sync goes to nft -f -", tx: () => tx("a"), full: true, oneShot: 1, session: 0 },
    { name: `a partial sync over ${SESSION_MAX_BYTES} bytes goes to nft -f -`, tx: big, full: false, oneShot: 1, session: 0 },
  ];
  for (const c of cases)
    test(c.name, async () => {
      const nft = fakeNft();
      const { exec, calls } = recorder();
      await new NftRunner(exec, new NftSession(nft.spawner)).apply(c.tx(), { full: c.full });
      expect({ oneShot: calls.length, session: nft.lines.filter((l) => l.startsWith("add ")).length }).toEqual({
        oneShot: c.oneShot,
        session: c.session,
      });
    });

  test("the session's statements are the transaction's, on one line", async () => {
    const nft = fakeNft();
    await new NftRunner(recorder().exec, new NftSession(nft.spawner)).apply(tx("a", "b"));
    expect(nft.lines[0]).toBe("add chain ip kpng a; add chain ip kpng b");
  });

  test("a partial sync over INLINE_MAX_BYTES goes to the session as a file", async () => {
    const nft = fakeNft();
    const names = Array.from({ length: 20 }, (_, i) => `chain-with-a-long-name-number-${i}`);
    const session = new NftSession(nft.spawner, { fileDir: scratch });
    await new NftRunner(recorder().exec, session).apply(tx(...names));
    expect(nft.included).toHaveLength(1);
    expect(nft.lines[0]).toBe(names.map((n) => `add chain ip kpng ${n}`).join("; "));
    session.close();
  });

  test("a session that could not start: the same transaction runs as nft -f -", async () => {
    const { exec, calls } = recorder();
    const broken: Spawner = {
      spawn() {
        throw new Error("spawn nft ENOENT");
      },
    };
    await new NftRunner(exec, new NftSession(broken)).apply(tx("a"));
    expect(calls.map((c) => c.stdin)).toEqual(["add chain ip kpng a\n"]);
  });

  test("a refused line is not retried as nft -f -: the backend resyncs in full", async () => {
    const nft = fakeNft();
    const { exec, calls } = recorder();
    await expect(new NftRunner(exec, new NftSession(nft.spawner)).apply(tx("REFUSE"))).rejects.toThrow("No such file or directory");
    expect(calls).toHaveLength(0);
  });
});
