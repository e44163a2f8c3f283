// `bun run release` as a user runs it: three binaries (linux/amd64,
// linux/arm64, windows/amd64), SHA256SUMS and a CycloneDX SBOM, built once
// here into a temporary directory. Each binary is checked for what can be
// checked on this x86-64 Linux machine: its headers say its platform, it
// carries the build's stamp (commit, tree state, date), the arm64 one runs
// under qemu-user-static with the same output as the amd64 one, and the
// Windows one runs under Wine (with a stand-in for a DLL Debian's Wine 8.0
// lacks: test/binary/wine/bcryptprimitives.c) with the same output too.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { BUN, ROOT, tempDir } from "../harness/kpng-process.ts";
import { run } from "../harness/netns.ts";

const dir = tempDir("kpng-release-");
const out = join(dir.path, "release");
const file = (name: string) => join(out, name);
let head = "";
let buildOutput = "";

beforeAll(async () => {
  dir.create();
  head = (await run(["git", "-C", ROOT, "rev-parse", "HEAD"])).trim();
  buildOutput = await run([BUN, join(ROOT, "build.ts"), "--release", "--outdir", out]);
}, 300_000);
afterAll(() => dir.remove());

/** ELF e_machine (x86-64 0x3e, aarch64 0xb7), or a PE's COFF machine (x86-64 0x8664). */
function machine(path: string): { format: "ELF" | "PE" | "?"; machine: number } {
  const b = readFileSync(path).subarray(0, 4096);
  if (b.readUInt32BE(0) === 0x7f454c46) return { format: "ELF", machine: b.readUInt16LE(18) };
  if (b.toString("latin1", 0, 2) === "MZ") {
    const pe = b.readUInt32LE(0x3c);
    if (b.toString("latin1", pe, pe + 4) === "PE\0\0") return { format: "PE", machine: b.readUInt16LE(pe + 4) };
  }
  return { format: "?", machine: 0 };
}

const QEMU = "/usr/bin/qemu-aarch64-static";
/** Debian's libc6-arm64-cross: the loader and libc the arm64 binary links to */
const ARM64_ROOT = "/usr/aarch64-linux-gnu";
const haveQemu = existsSync(QEMU) && existsSync(join(ARM64_ROOT, "lib/ld-linux-aarch64.so.1"));
const arm64 = (...args: string[]) => run([QEMU, "-L", ARM64_ROOT, file("kpng-linux-arm64"), ...args]);
const amd64 = (...args: string[]) => run([file("kpng-linux-amd64"), ...args]);
const example = join(ROOT, "examples/cluster.yaml");

const WINE = "/usr/lib/wine/wine64";
const MINGW = "/usr/bin/x86_64-w64-mingw32-gcc";
const haveWine = existsSync(WINE) && existsSync(MINGW);
const wine = (...args: string[]) =>
  run(["env", `WINEPREFIX=${join(dir.path, "wine")}`, "WINEDEBUG=-all", WINE, file("kpng-windows-amd64.exe"), ...args]);

describe("bun run release", () => {
  test("writes the three binaries, SHA256SUMS over them and the SBOM", () => {
    for (const f of ["kpng-linux-amd64", "kpng-linux-arm64", "kpng-windows-amd64.exe", "SHA256SUMS", "sbom.cdx.json"])
      expect(existsSync(file(f))).toBe(true);
    expect(buildOutput).toContain("built ");
  });

  test("SHA256SUMS checks with sha256sum -c", async () => {
    const lines = readFileSync(file("SHA256SUMS"), "utf8").trim().split("\n");
    expect(lines.map((l) => l.split(/\s+/)[1]).sort()).toEqual(["kpng-linux-amd64", "kpng-linux-arm64", "kpng-windows-amd64.exe"]);
    expect(await run(["sh", "-c", `cd "${out}" && sha256sum -c SHA256SUMS`])).toMatch(/kpng-windows-amd64.exe: OK/);
  });

  test.each([
    ["kpng-linux-amd64", "ELF", 0x3e],
    ["kpng-linux-arm64", "ELF", 0xb7],
    ["kpng-windows-amd64.exe", "PE", 0x8664],
  ] as const)("%s is a %s binary for its machine", (name, format, m) => {
    expect(machine(file(name))).toEqual({ format, machine: m });
  });

  test("--version and --version=raw: kpng's version, stamped with this commit, its tree state and the build date", async () => {
    expect(await amd64("--version")).toBe(`kpng v${pkg.version}\n`);
    const info = JSON.parse(await amd64("--version=raw"));
    expect(info).toMatchObject({ gitVersion: `v${pkg.version}`, gitCommit: head, compiler: "bun", platform: "linux/amd64" });
    expect(["clean", "dirty"]).toContain(info.gitTreeState);
    expect(Date.parse(info.buildDate)).toBeGreaterThan(Date.now() - 3600_000);
  });

  test("the arm64 and Windows binaries embed the same stamp", () => {
    for (const name of ["kpng-linux-arm64", "kpng-windows-amd64.exe"]) expect(readFileSync(file(name)).includes(head)).toBe(true);
  });

  test("the SBOM is CycloneDX JSON naming every production dependency", () => {
    const bom = JSON.parse(readFileSync(file("sbom.cdx.json"), "utf8"));
    expect(bom.bomFormat).toBe("CycloneDX");
    const names = new Set(
      (bom.components as Array<{ group?: string; name: string }>).map((c) => (c.group ? `${c.group}/${c.name}` : c.name)),
    );
    for (const dep of Object.keys(pkg.dependencies)) expect(names.has(dep)).toBe(true);
    expect(names.has("@biomejs/biome")).toBe(false);
  });
});

// CI installs both (.ci/run): there a missing one fails rather than skips
describe.skipIf(!haveQemu && !process.env.CI)("the arm64 binary under qemu-user-static", () => {
  test("--version=raw says linux/arm64 and the same commit", async () => {
    expect(JSON.parse(await arm64("--version=raw"))).toMatchObject({ gitCommit: head, platform: "linux/arm64" });
  });

  test("`local --input examples/cluster.yaml` prints what the amd64 binary prints", async () => {
    const args = ["local", "--input", example, "--node-name", "node-1", "-o", "json"];
    expect(await arm64(...args)).toBe(await amd64(...args));
  });

  test("`--backend nft --dry-run --once` prints the same nft transaction", async () => {
    const args = ["--input", example, "--node-name", "node-1", "--backend", "nft", "--dry-run", "--once"];
    const arm = await arm64(...args);
    expect(arm).toContain("add table ip kpng");
    expect(arm).toBe(await amd64(...args));
  });
});

describe.skipIf(!haveWine && !process.env.CI)("the Windows binary under Wine", () => {
  beforeAll(async () => {
    await run([MINGW, "-shared", "-o", file("bcryptprimitives.dll"), join(import.meta.dir, "wine/bcryptprimitives.c"), "-ladvapi32"]);
  }, 120_000);

  test("--version=raw says windows/amd64 and the same commit", async () => {
    expect(JSON.parse(await wine("--version=raw"))).toMatchObject({ gitCommit: head, platform: "windows/amd64" });
  });

  test("`local --input examples/cluster.yaml` prints what the amd64 binary prints", async () => {
    const args = ["local", "--input", example, "--node-name", "node-1", "-o", "json"];
    expect(await wine(...args)).toBe(await amd64(...args));
  });

  test("`--backend winkernel --dry-run --once` prints the same HNS calls", async () => {
    const args = ["--input", example, "--node-name", "node-1", "--backend", "winkernel", "--dry-run", "--once"];
    const win = await wine(...args);
    expect(win.length).toBeGreaterThan(100);
    expect(win).toBe(await amd64(...args));
  });
});
