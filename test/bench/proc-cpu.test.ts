// The benches' CPU of a process tree (bench/proc-cpu.ts): kube-proxy's and
// kpng's CPU includes their children (nft), alive or already reaped. Real
// processes here; the figures the benches print are never asserted.

import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { type ProcStat, parseStat, treeCpuMs, treeCpuMsOf } from "../../bench/proc-cpu.ts";

// a shell loop that keeps a core busy for a few hundred ms of CPU
const BUSY = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done";
const spawned: Bun.Subprocess[] = [];
afterEach(async () => {
  for (const p of spawned.splice(0)) {
    p.kill("SIGKILL");
    await p.exited;
  }
});
const sh = (script: string) => {
  const p = Bun.spawn(["sh", "-c", script], { stdout: "ignore", stderr: "ignore" });
  spawned.push(p);
  return p;
};
const ownMs = (pid: number) => parseStat(readFileSync(`/proc/${pid}/stat`, "utf8")).ownMs;

describe("parseStat", () => {
  test("fields are read after the last `)`: a command name with spaces and parentheses", () => {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    const line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 10 0 0 0 123 45 6 7 20 0 1 0 99 0 0";
    expect(parseStat(line)).toEqual({ pid: 4242, ppid: 17, ownMs: 1680, reapedMs: 130 });
  });

  test("a line that is not a stat line is an error naming it", () => {
    expect(() => parseStat("hello")).toThrow(/not a \/proc\/PID\/stat line: "hello"/);
  });

  test("this process's own line parses, its parent is its ppid", () => {
    const s = parseStat(readFileSync("/proc/self/stat", "utf8"));
    expect(s.ppid).toBe(process.ppid);
  });
});

describe("treeCpuMsOf", () => {
  const stat = (pid: number, ppid: number, ownMs: number, reapedMs = 0): ProcStat => ({ pid, ppid, ownMs, reapedMs });
  const cases: Array<{ name: string; root: number; stats: ProcStat[]; ms: number }> = [
    { name: "a lone process: its own time and its reaped children's", root: 10, stats: [stat(10, 1, 100, 30)], ms: 130 },
    {
      name: "live descendants count, at every depth; other trees do not",
      root: 10,
      stats: [stat(10, 1, 100), stat(11, 10, 20), stat(12, 11, 5, 1), stat(20, 1, 999), stat(21, 20, 999)],
      ms: 126,
    },
    { name: "a process that is gone costs nothing more", root: 10, stats: [stat(20, 1, 999)], ms: 0 },
  ];
  for (const c of cases) test(c.name, () => expect(treeCpuMsOf(c.root, c.stats)).toBe(c.ms));
});

describe("treeCpuMs, real processes", () => {
  test("a child still running is counted: the tree's time grows while the parent's own stays idle", async () => {
    const p = sh(`${BUSY} & wait`);
    const end = Date.now() + 30_000;
    while (treeCpuMs(p.pid) < 100 && Date.now() < end) await Bun.sleep(50);
    expect(treeCpuMs(p.pid)).toBeGreaterThanOrEqual(100);
    expect(ownMs(p.pid)).toBeLessThan(100);
  });

  test("a child that has exited and been reaped is still counted (the parent's cutime + cstime)", async () => {
    const p = sh(`sh -c '${BUSY}'; echo > /dev/null; sleep 30`);
    const children = () => readFileSync(`/proc/${p.pid}/task/${p.pid}/children`, "utf8").trim().split(" ").filter(Boolean).map(Number);
    // the busy child is done once the parent's only child is the `sleep`
    const end = Date.now() + 30_000;
    const sleeping = () => children().some((c) => readFileSync(`/proc/${c}/cmdline`, "utf8").startsWith("sleep"));
    while (!sleeping() && Date.now() < end) await Bun.sleep(50);
    expect(sleeping()).toBe(true);
    const s = parseStat(readFileSync(`/proc/${p.pid}/stat`, "utf8"));
    expect(s.reapedMs).toBeGreaterThanOrEqual(50);
    expect(treeCpuMs(p.pid)).toBeGreaterThanOrEqual(s.reapedMs);
  });
});
