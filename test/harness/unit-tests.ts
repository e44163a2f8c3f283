// `npm run test:unit`: the tests a contributor runs in seconds, without
// root, network namespaces, the Kubernetes binaries or the apt packages the
// whole suite needs (nft, iptables, ipset, ipvsadm, conntrack, python…).
// CI keeps running everything (`npm test`).
//
// Which tests: the files under UNIT_ROOMS (the brain, renderers with golden
// files, parsers, the API in process) that do not reach the host. A test
// reaches the host when it or a helper it imports (followed through the
// repository, transitively) imports one of HOST_HARNESS or starts a process
// itself: so a test that needs root cannot sneak in by being put in the
// right folder, it is left out by what it does. `--list` prints the choice
// and why each other file was left out.

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");

/** folders whose tests are candidates: pure logic, renderers, parsers, in-process API */
export const UNIT_ROOMS = [
  "test/brain",
  "test/wire",
  "test/kube-http",
  "test/net",
  "test/config",
  "test/sources",
  "test/global",
  "test/api",
  "test/node",
  "test/host",
  "test/nft",
  "test/iptables",
  "test/ipvs",
  "test/ebpf",
  "test/userspace",
  "test/winkernel",
  "test/imports.test.ts",
  "test/harness/unit-tests.test.ts",
];

/** harness modules that need root, network namespaces, the Kubernetes binaries or a whole kpng process */
export const HOST_HARNESS = [
  "test/harness/netns.ts",
  "test/harness/kube-apiserver.ts",
  "test/harness/kube-proxy.ts",
  "test/harness/kpng-process.ts",
];

/**
 * Starting a process: a tool of the host (nft, ip, buf, python, openssl…)
 * or kpng itself, directly or through a backend's real executor (the
 * factories of plugins/<backend>/executor.ts and the toolkit's runCommand).
 */
const SPAWNS =
  /\bBun\.spawn(Sync)?\(|\bBun\.\$|from "node:child_process"|\b(runCommand|commandExecutor|processExecutor|spawnExecutor|processSpawner|kernelWriter|createHcnClient)\(/;

/**
 * The unit set runs each piece of code briefly: JavaScriptCore's top tier (FTL) compiles hot
 * functions on background threads at a cost the few milliseconds left of a test never earn
 * back. Without it the set took a sixth less CPU (about 6 s instead of 7), the same tests
 * passing; the lower tiers (DFG included) stay on. kpng itself, long-running, keeps FTL.
 */
export const UNIT_ENV = { BUN_JSC_useFTLJIT: "0" };

const isTest = (f: string) => f.endsWith(".test.ts");

function filesUnder(path: string): string[] {
  if (path.endsWith(".ts")) return [path];
  return readdirSync(join(ROOT, path), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && isTest(e.name))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)))
    .sort();
}

/** relative specifiers a file imports (static, type and dynamic), resolved from the root */
function importsOf(file: string, text: string): string[] {
  const specs = [...text.matchAll(/\bfrom\s+"(\.[^"]+)"|\bimport\s*\(?\s*"(\.[^"]+)"/g)].map((m) => m[1] ?? m[2]);
  return specs.map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

/** each file read once: the walks from the tests go through the same sources (read again for each, the choice took 0.24 s of CPU, now 0.1) */
const sources = new Map<string, string | undefined>();
function sourceOf(file: string): string | undefined {
  if (!sources.has(file)) {
    let text: string | undefined;
    try {
      text = readFileSync(join(ROOT, file), "utf8");
    } catch {
      text = undefined;
    }
    sources.set(file, text);
  }
  return sources.get(file);
}

/**
 * How `file` reaches the host, or null: the import chain from it to a host
 * harness module, or to a test-side file that starts a process. Sources
 * under src/ and plugins/ are followed for host harness imports only: every
 * backend holds code that spawns its tools, but only a test that calls an
 * executor's factory (which SPAWNS names) runs it.
 */
export function reachesHost(file: string, seen = new Set<string>()): string[] | null {
  if (seen.has(file)) return null;
  seen.add(file);
  if (HOST_HARNESS.includes(file)) return [file];
  if (!file.endsWith(".ts") || file.startsWith("src/gen/")) return null;
  const text = sourceOf(file);
  if (text === undefined) return null; // package.json, a generated file not built yet: nothing of the host
  if (file.startsWith("test/") && SPAWNS.test(text)) return [`${file} (starts a process)`];
  for (const target of importsOf(file, text)) {
    const chain = reachesHost(target, seen);
    if (chain) return [file, ...chain];
  }
  return null;
}

export function unitTests(): { chosen: string[]; left: [string, string][] } {
  const chosen: string[] = [];
  const left: [string, string][] = [];
  for (const file of UNIT_ROOMS.flatMap(filesUnder)) {
    const chain = reachesHost(file);
    if (chain) left.push([file, chain.join(" -> ")]);
    else chosen.push(file);
  }
  return { chosen, left };
}

if (import.meta.main) {
  const { chosen, left } = unitTests();
  if (process.argv.includes("--list")) {
    for (const f of chosen) console.log(f);
    for (const [f, why] of left) console.log(`# left out ${f}: ${why}`);
    process.exit(0);
  }
  const args = process.argv.slice(2);
  const proc = Bun.spawn([process.execPath, "test", "--timeout", "60000", ...args, ...chosen.map((f) => `./${f}`)], {
    cwd: ROOT,
    env: { ...process.env, ...UNIT_ENV },
    stdio: ["inherit", "inherit", "inherit"],
  });
  process.exit(await proc.exited);
}
