// CPU time of a whole process tree, from /proc: what a proxy costs the node,
// its children included (kube-proxy's `nft` runs, kpng's). A process's own
// time is utime + stime of /proc/PID/stat; the children it has reaped are in
// its cutime + cstime; the children still alive are found by walking every
// /proc/PID/stat's parent pid. A child between its exit and its reaping is
// counted by neither (a few ms, once).

import { readdirSync, readFileSync } from "node:fs";

/** USER_HZ: the unit of the time fields of /proc/PID/stat (100 on every Linux kube-proxy runs on) */
const TICK_MS = 10;

export interface ProcStat {
  pid: number;
  ppid: number;
  /** utime + stime: the process's own CPU time, ms */
  ownMs: number;
  /** cutime + cstime: its reaped children's (and their reaped children's), ms */
  reapedMs: number;
}

/**
 * One /proc/PID/stat line. The command name (field 2) sits in parentheses
 * and may hold spaces and parentheses itself: the fields after it are read
 * from the last `)`.
 */
export function parseStat(text: string): ProcStat {
  const close = text.lastIndexOf(")");
  const pid = Number.parseInt(text, 10);
  const f = text.slice(close + 2).split(" ");
  // after the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17); f[0] is field 3
  const n = (k: number) => Number(f[k - 3]);
  if (close < 0 || !Number.isInteger(pid) || f.length < 15 || [4, 14, 15, 16, 17].some((k) => !Number.isFinite(n(k))))
    throw new Error(`not a /proc/PID/stat line: ${JSON.stringify(text.slice(0, 80))}`);
  return { pid, ppid: n(4), ownMs: (n(14) + n(15)) * TICK_MS, reapedMs: (n(16) + n(17)) * TICK_MS };
}

/** CPU ms of `root` and every descendant among `stats`, reaped children included. */
export function treeCpuMsOf(root: number, stats: ProcStat[]): number {
  const children = new Map<number, ProcStat[]>();
  for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s]);
  const self = stats.find((s) => s.pid === root);
  if (!self) return 0;
  let ms = 0;
  const walk = (s: ProcStat) => {
    ms += s.ownMs + s.reapedMs;
    for (const c of children.get(s.pid) ?? []) walk(c);
  };
  walk(self);
  return ms;
}

/** Every process's stat line now (those that exit meanwhile are left out). */
export function procStats(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      out.push(parseStat(readFileSync(`/proc/${d}/stat`, "utf8")));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** CPU ms the process tree of `pid` has used so far (0 once it is gone). */
export const treeCpuMs = (pid: number): number => treeCpuMsOf(pid, procStats());
