// Once its first sync is in, kpng drops the executable's pages that start-up
// touched from its resident set (src/core/release-pages.ts): read-only
// mappings of the executable only, which come back from the page cache when
// used again. The compiled binary must go on working afterwards.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { elfSection, filePageRuns, parseSmaps, releasable } from "../../src/core/release-pages.ts";
import { FREE_PORTS, ROOT, startKpng, tempDir } from "../harness/kpng-process.ts";
import { compiledKpng } from "../fixtures/compiled.ts";

/** one mapping of /proc/PID/smaps as the parser reads it: the kernel's header line, then its Rss and Anonymous lines (kB) */
const mapping = (header: string, rssKB: number, anonymousKB: number) =>
  `${header}\n${smapsLine("Rss:", rssKB)}\n${smapsLine("Anonymous:", anonymousKB)}\n`;
/** the kernel's "%-16s%8lu kB" (fs/proc/task_mmu.c) */
const smapsLine = (name: string, kB: number) => `${name.padEnd(16)}${String(kB).padStart(8)} kB`;

const SMAPS = [
  mapping("00200000-01a39000 r--p 00000000 fe:00 5318883                            /opt/kpng", 5860, 0),
  mapping("01a40000-0684a000 r-xp 01838000 fe:00 5318883                            /opt/kpng", 34088, 0),
  mapping("0684a000-0685f000 rw-p 06641000 fe:00 5318883                            /opt/kpng", 84, 84),
  mapping("0685f000-06867000 r--p 06656000 fe:00 5318883                            /opt/kpng", 32, 32),
  mapping("06867000-0708b000 rw-p 0665e000 fe:00 5318883                            /opt/kpng", 5856, 120),
  mapping("07100000-07200000 r--p 00000000 fe:00 5318884                            /opt/kpng", 0, 0),
  mapping("3fa12c00000-3fa52c00000 rw-p 00000000 00:00 0", 11184, 11184),
  mapping("7f545086f000-7f54509c5000 r-xp 00026000 fe:00 339380                     /usr/lib/x86_64-linux-gnu/libc.so.6", 1220, 0),
].join("");

test("only resident, read-only, never-written mappings of the executable are released", () => {
  const maps = parseSmaps(SMAPS);
  expect(maps).toHaveLength(8);
  expect(maps[1]).toEqual({ start: 0x1a40000n, end: 0x684a000n, perms: "r-xp", path: "/opt/kpng", anonymousKB: 0, rssKB: 34088 });
  // the RELRO page (read-only now, written by the loader) and writable data stay; so do other files and anonymous memory
  expect(releasable(maps, "/opt/kpng").map((m) => m.start)).toEqual([0x200000n, 0x1a40000n]);
});

test("the bundle's pages released are the resident ones still the file's own, in runs", () => {
  const present = 1n << 63n;
  const file = 1n << 61n;
  // page 0 the file's, 1 a private copy, 2-3 the file's, 4 not resident, 5 the file's
  const entries = new BigUint64Array([present | file | 7n, present | 9n, present | file, present | file, file, present | file]);
  expect(filePageRuns(0x10000n, entries, 4096n)).toEqual([
    { start: 0x10000n, end: 0x11000n },
    { start: 0x12000n, end: 0x14000n },
    { start: 0x15000n, end: 0x16000n },
  ]);
});

const dir = tempDir("kpng-pages-");
const bin = join(dir.path, "kpng");
const input = join(dir.path, "cluster.yaml");

beforeAll(async () => {
  dir.create();
  copyFileSync(await compiledKpng(), bin);
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
  // a build of dist/kpng (shared by the suites of one test process) on a loaded machine
}, 300_000);
afterAll(() => dir.remove());

test("the compiled binary's bundle section is found in its ELF section headers", () => {
  const bundle = elfSection(bin, ".bun");
  expect(bundle).toBeDefined();
  // the bundle holds kpng's code and its bytecode: megabytes
  expect(Number(bundle!.end - bundle!.start)).toBeGreaterThan(1_000_000);
  expect(elfSection(bin, ".no-such-section")).toBeUndefined();
  expect(elfSection(input, ".bun")).toBeUndefined(); // not an ELF file
});

const rssFileKB = (pid: number) => Number(/RssFile:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);

test.skipIf(process.platform !== "linux")(
  "the compiled binary releases its start-up pages after the first sync and once start-up settled, and later syncs still run",
  async () => {
    const p = startKpng(["--input", input, "--backend", "nft", "--dry-run", "--node-name", "node-1", "-v=2", ...FREE_PORTS], { bin });
    try {
      const line = await p.waitFor(/released the executable's start-up pages when="first sync"/);
      const released = Number(/residentKB=(\d+)/.exec(line)?.[1]);
      // Bun's runtime code and data touched by a start: tens of MB
      expect(released).toBeGreaterThan(10_000);
      // what is resident again right after is a part of it (libraries' pages count here too)
      expect(rssFileKB(p.proc.pid)).toBeLessThan(released);
      // once more when what follows the first sync has run, and never again
      await p.waitFor(/released the executable's start-up pages when=settled/);
      // an edit is read, computed and rendered by code that had to come back from the page cache
      writeFileSync(input, readFileSync(input, "utf8").replace("address: 203.0.113.11", "address: 203.0.113.111"));
      await p.waitFor(/203\.0\.113\.111/);
    } finally {
      await p.stop();
    }
  },
  // three loaded waits (LOADED_WAIT_MS each)
  210_000,
);
