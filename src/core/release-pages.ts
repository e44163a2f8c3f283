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
// wrote (relocations, RELRO) would be lost, not refetched. The embedded JS
// bundle and its bytecode (Bun's `.bun` section) sit in the executable's
// writable segment, beside data the runtime writes: there, only the
// section's pages that /proc/self/pagemap shows as the file's own are
// advised (nothing writes the bundle once it is loaded).

import { FFIType, dlopen } from "bun:ffi";
import { closeSync, openSync, readFileSync, readSync, realpathSync } from "node:fs";

const MADV_DONTNEED = 4;
const libcSymbols = {
  madvise: { args: [FFIType.u64, FFIType.u64, FFIType.i32], returns: FFIType.i32 },
  getpagesize: { args: [], returns: FFIType.i32 },
} as const;
let libc: ReturnType<typeof dlopen<typeof libcSymbols>>["symbols"] | undefined;

/** where `bun build --compile` puts the bundle in a Linux executable */
const BUNDLE_SECTION = ".bun";

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

/** [start, end) in memory of section `name` of a non-relocatable 64-bit little-endian ELF executable; undefined otherwise */
export function elfSection(path: string, name: string): { start: bigint; end: bigint } | undefined {
  const fd = openSync(path, "r");
  try {
    const read = (pos: number, len: number) => {
      const b = Buffer.alloc(len);
      return readSync(fd, b, 0, len, pos) === len ? b : undefined;
    };
    const h = read(0, 64);
    const ET_EXEC = 2;
    if (h?.readUInt32BE(0) !== 0x7f454c46 || h[4] !== 2 || h[5] !== 1 || h.readUInt16LE(16) !== ET_EXEC) return undefined;
    const shoff = Number(h.readBigUInt64LE(0x28));
    const shentsize = h.readUInt16LE(0x3a);
    const shnum = h.readUInt16LE(0x3c);
    const table = read(shoff, shentsize * shnum);
    if (!table || shentsize < 64) return undefined;
    const strtabHeader = h.readUInt16LE(0x3e) * shentsize;
    const names = read(Number(table.readBigUInt64LE(strtabHeader + 24)), Number(table.readBigUInt64LE(strtabHeader + 32)));
    if (!names) return undefined;
    for (let i = 0; i < shnum; i++) {
      const at = i * shentsize;
      const nameAt = table.readUInt32LE(at);
      if (names.toString("latin1", nameAt, names.indexOf(0, nameAt)) !== name) continue;
      const start = table.readBigUInt64LE(at + 16);
      return start ? { start, end: start + table.readBigUInt64LE(at + 32) } : undefined;
    }
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/**
 * The runs of whole pages in [start, end) that are resident and still the
 * file's own, from their /proc/PID/pagemap entries (`entries[i]` for the
 * page at `first + i` pages): present (bit 63) and file-backed (bit 61),
 * not a private copy the process wrote.
 */
export function filePageRuns(first: bigint, entries: BigUint64Array, pageSize: bigint): Array<{ start: bigint; end: bigint }> {
  const runs: Array<{ start: bigint; end: bigint }> = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (!((e >> 63n) & 1n) || !((e >> 61n) & 1n)) continue;
    const addr = first + BigInt(i) * pageSize;
    const last = runs.at(-1);
    if (last && last.end === addr) last.end = addr + pageSize;
    else runs.push({ start: addr, end: addr + pageSize });
  }
  return runs;
}

/** the file's own resident pages of the executable's section `name` (whole pages inside it only) */
function sectionFilePages(exe: string, name: string, pageSize: bigint): Array<{ start: bigint; end: bigint }> {
  const section = elfSection(exe, name);
  if (!section) return [];
  const first = (section.start + pageSize - 1n) / pageSize;
  const pages = Number(section.end / pageSize - first);
  if (pages <= 0) return [];
  const fd = openSync("/proc/self/pagemap", "r");
  try {
    const buf = Buffer.alloc(pages * 8);
    if (readSync(fd, buf, 0, buf.length, Number(first * 8n)) !== buf.length) return [];
    return filePageRuns(first * pageSize, new BigUint64Array(buf.buffer, buf.byteOffset, pages), pageSize);
  } finally {
    closeSync(fd);
  }
}

/**
 * Drops the executable's resident read-only pages, and the bundle's, from
 * this process's mappings; returns the kB that were resident. Linux only;
 * anywhere else, or when libc cannot be loaded, it does nothing and
 * returns 0.
 */
export function releaseExecutablePages(): number {
  if (process.platform !== "linux") return 0;
  try {
    libc ??= dlopen("libc.so.6", libcSymbols).symbols;
  } catch {
    return 0;
  }
  const madvise = libc.madvise;
  const exe = realpathSync(process.execPath);
  let kb = 0;
  for (const m of releasable(parseSmaps(readFileSync("/proc/self/smaps", "utf8")), exe)) {
    if (madvise(m.start, m.end - m.start, MADV_DONTNEED) === 0) kb += m.rssKB;
  }
  try {
    for (const r of sectionFilePages(exe, BUNDLE_SECTION, BigInt(libc.getpagesize()))) {
      if (madvise(r.start, r.end - r.start, MADV_DONTNEED) === 0) kb += Number((r.end - r.start) / 1024n);
    }
  } catch {
    // no pagemap (an old kernel, a sandbox): the bundle stays resident
  }
  return kb;
}
