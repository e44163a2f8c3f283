// After start-up, the executable's pages that only start-up used leave
// kpng's resident set. Bun's runtime is most of the binary (JSC's parsers,
// JIT tiers, the bytecode loader, TLS, JSON): starting and loading the first
// lists touches tens of MB of its code and read-only data, and a proxy that
// then idles or handles a change now and then uses a fraction of them. The
// kernel counts a touched page in RSS until memory pressure evicts it.
//
// madvise(MADV_DONTNEED) drops this process's mappings of those pages: they
// stay in the page cache, and a page used again comes back on its first
// access (a minor fault, no disk read). Only mappings of the executable that
// are read-only and hold no private copy are advised: a page the process
// wrote (relocations, RELRO) would be lost, not refetched.

import { FFIType, dlopen } from "bun:ffi";
import { readFileSync, realpathSync } from "node:fs";

const MADV_DONTNEED = 4;

/** a mapping of /proc/self/smaps: address range, permissions, file, and its Anonymous (privately copied) kB */
export interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  path: string;
  anonymousKB: number;
  rssKB: number;
}

/** the mappings of /proc/self/smaps text */
export function parseSmaps(text: string): Mapping[] {
  const out: Mapping[] = [];
  let cur: Mapping | undefined;
  for (const line of text.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      cur = { start: BigInt(`0x${head[1]}`), end: BigInt(`0x${head[2]}`), perms: head[3], path: head[4], anonymousKB: 0, rssKB: 0 };
      out.push(cur);
      continue;
    }
    if (!cur) continue;
    if (line.startsWith("Anonymous:")) cur.anonymousKB = Number(line.split(/\s+/)[1]);
    else if (line.startsWith("Rss:")) cur.rssKB = Number(line.split(/\s+/)[1]);
  }
  return out;
}

/** the mappings of `exe` that can be dropped and fetched again from the file: read-only, never written by this process */
export function releasable(maps: readonly Mapping[], exe: string): Mapping[] {
  return maps.filter((m) => m.path === exe && !m.perms.includes("w") && m.perms.endsWith("p") && m.anonymousKB === 0 && m.rssKB > 0);
}

/**
 * Drops the executable's resident read-only pages from this process's
 * mappings; returns the kB that were resident. Linux only; anywhere else,
 * or when libc cannot be loaded, it does nothing and returns 0.
 */
export function releaseExecutablePages(): number {
  if (process.platform !== "linux") return 0;
  let madvise: (addr: bigint, len: bigint, advice: number) => number;
  try {
    madvise = dlopen("libc.so.6", { madvise: { args: [FFIType.u64, FFIType.u64, FFIType.i32], returns: FFIType.i32 } }).symbols.madvise;
  } catch {
    return 0;
  }
  const exe = realpathSync(process.execPath);
  let kb = 0;
  for (const m of releasable(parseSmaps(readFileSync("/proc/self/smaps", "utf8")), exe)) {
    if (madvise(m.start, m.end - m.start, MADV_DONTNEED) === 0) kb += m.rssKB;
  }
  return kb;
}
