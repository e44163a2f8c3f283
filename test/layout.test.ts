// The Layout section of docs/architecture.md is a map of the tree: every folder it names
// exists, and every folder a reader could open (each folder of src/ and
// plugins/, and each top-level room elsewhere) is on it. A new room, a
// moved or a deleted one fails here until the map says so too.
//
// And test/ mirrors the rooms: whoever opens a room of src/ or plugins/
// finds its tests in the folder the table below names, and every other
// folder of test/ says why it is there.

import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

/**
 * The Layout block's entries: a line whose first word is a path names it
 * (folders end in "/"), nested under the last folder indented less;
 * continuation lines start with prose. Paths are relative to their parent.
 */
function layoutEntries(readme: string): { path: string; folder: boolean }[] {
  const section = readme.split(/^## Layout\n/m)[1]?.split(/^## /m)[0] ?? "";
  const block = section.split("```")[1] ?? "";
  const out: { path: string; folder: boolean }[] = [];
  const stack: { indent: number; path: string }[] = [];
  for (const line of block.split("\n").slice(1)) {
    const m = /^( *)(\S+)/.exec(line);
    if (!m) continue;
    const indent = m[1].length;
    const word = m[2];
    const isPath = word.endsWith("/") || /^[\w.-]+(\/[\w.-]+)*\.\w+$/.test(word);
    if (!isPath) continue;
    while (stack.length && stack.at(-1)!.indent >= indent) stack.pop();
    const parent = stack.at(-1)?.path ?? "";
    const path = parent + word;
    if (word.endsWith("/")) {
      out.push({ path: path.slice(0, -1), folder: true });
      stack.push({ indent, path });
    } else out.push({ path, folder: false });
  }
  return out;
}

/** the files git tracks, from the repository root */
function trackedFiles(): string[] {
  return Bun.spawnSync(["git", "ls-files"], { cwd: ROOT }).stdout.toString().trim().split("\n");
}

/** the folders git tracks files in, with their parents */
function trackedFolders(): string[] {
  const dirs = new Set<string>();
  for (const f of trackedFiles()) {
    const parts = f.split("/").slice(0, -1);
    for (let i = 1; i <= parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  return [...dirs].sort();
}

/** what a reader must find on the map: every folder of src/ and plugins/, the others down to their rooms */
const mustBeNamed = (dir: string) => {
  const depth = dir.split("/").length;
  return dir.startsWith("src/") || dir === "src" || dir.startsWith("plugins") || depth <= 2;
};

describe("Layout (docs/architecture.md)", () => {
  const entries = layoutEntries(readFileSync(join(ROOT, "docs/architecture.md"), "utf8"));

  test("the section parses into entries", () => {
    expect(entries.length).toBeGreaterThan(20);
  });

  test("every folder and file it names exists", () => {
    const missing = entries.filter((e) => !existsSync(join(ROOT, e.path)) || statSync(join(ROOT, e.path)).isDirectory() !== e.folder);
    // src/gen/ is generated (buf generate at npm ci), so it exists wherever tests run
    expect(missing.map((e) => e.path)).toEqual([]);
  });

  test("every source folder and room is named", () => {
    // a path names its ancestors too (`src/core/` puts src/ on the map)
    const named = new Set(entries.flatMap((e) => e.path.split("/").map((_, i, parts) => parts.slice(0, i + 1).join("/"))));
    expect(
      trackedFolders()
        .filter(mustBeNamed)
        .filter((d) => !named.has(d)),
    ).toEqual([]);
  });
});

/**
 * Each room of src/ and plugins/ and the folder of its tests: the room's
 * path without `src/core/` (a backend's without `plugins/`; the plugin
 * host keeps its name). A folder inside a room (brain/k8s/, ebpf/bpf/) is
 * part of it, tested in the room's folder.
 */
const MIRRORS: Record<string, string> = {
  "src/core/brain": "test/brain",
  "src/core/sources": "test/sources",
  "src/core/config": "test/config",
  "src/core/node": "test/node",
  "src/core/global": "test/global",
  "src/core/api/server": "test/api/server",
  "src/core/api/client": "test/api/client",
  "src/core/api/tls": "test/api/tls",
  "src/core/wire": "test/wire",
  "src/core/kube-http": "test/kube-http",
  "src/core/net": "test/net",
  "src/core/introspect": "test/introspect",
  "src/host": "test/host",
  "src/host/toolkit": "test/host/toolkit",
  "src/host/leftovers": "test/host/leftovers",
  "plugins/nft": "test/nft",
  "plugins/iptables": "test/iptables",
  "plugins/ipvs": "test/ipvs",
  "plugins/winkernel": "test/winkernel",
  "plugins/ebpf": "test/ebpf",
  "plugins/userspace": "test/userspace",
};

/** folders of src/ and plugins/ that hold rooms rather than being one */
const NOT_ROOMS: Record<string, string> = {
  src: "main.ts, the command line: tested as users type it in test/cli",
  "src/core": "errors, log, pacing and the other files every room shares",
  "src/core/api": "the server, the client and TLS: one room to the import graph (test/imports.test.ts)",
  plugins: "one folder per backend",
};

/** folders of test/ that mirror no room */
const WHOLE_PROCESS_AND_SHARED: Record<string, string> = {
  "test/fixtures": "the one address plan, states and objects every room uses, the corpus",
  "test/harness": "what tests run in or against: network namespaces, probes, the kpng process, a fake API server",
  "test/cli": "the command line (src/main.ts) as a user types it, whole process",
  "test/deployed": "the whole process with only a user's flags, real packets and faults",
  "test/binary": "the compiled executable (build.ts)",
  "test/image": "the OCI image (deploy/image/) under runc",
  "test/deploy": "the manifests of deploy/ against the program's flags, config and RBAC",
  "test/docs": "the documentation: links, flags against --help, paths and commands in code blocks",
  "test/bench": "the benches' own helpers (the floors they print), not their figures",
};

/** the longest key of `table` that is `path` or one of its parent folders */
const ownerIn = (table: Record<string, string>, path: string) =>
  Object.keys(table)
    .filter((k) => path === k || path.startsWith(`${k}/`))
    .sort((a, b) => b.length - a.length)[0];

const testRooms = Object.fromEntries(Object.values(MIRRORS).map((t) => [t, t]));

/**
 * The repository files a test file imports, from the root: relative
 * specifiers of `from "…"`, `import "…"` and `import("…")`, types included
 * (a room's tests may hold only its types and drive it through another room).
 */
const importedBy = (file: string) =>
  [...readFileSync(join(ROOT, file), "utf8").matchAll(/\b(?:from|import)\s*\(?\s*"(\.[^"]+)"/g)].map((m) =>
    relative(ROOT, resolve(ROOT, dirname(file), m[1])),
  );

describe("test/ mirrors the rooms", () => {
  const folders = trackedFolders();

  test("every folder of src/ and plugins/ is a room, inside one, or holds rooms", () => {
    const open = folders.filter((d) => /^(src|plugins)(\/|$)/.test(d)).filter((d) => !(d in NOT_ROOMS) && !ownerIn(MIRRORS, d));
    expect(open).toEqual([]);
    const gone = [...Object.keys(MIRRORS), ...Object.keys(NOT_ROOMS)].filter((d) => !folders.includes(d));
    expect(gone).toEqual([]);
  });

  test("every folder of test/ is a room's mirror, inside one, or named with its reason", () => {
    const isGroup = (d: string) => Object.values(MIRRORS).some((t) => t.startsWith(`${d}/`)); // test/api holds the API's three
    const open = folders
      .filter((d) => d.startsWith("test/"))
      .filter((d) => !ownerIn(testRooms, d) && !ownerIn(WHOLE_PROCESS_AND_SHARED, d) && !isGroup(d));
    expect(open).toEqual([]);
    const gone = Object.keys(WHOLE_PROCESS_AND_SHARED).filter((d) => !folders.includes(d));
    expect(gone).toEqual([]);
  });

  test("every room's mirror holds tests that import the room", () => {
    const tests = trackedFiles().filter((f) => f.startsWith("test/") && f.endsWith(".test.ts"));
    const untested = Object.entries(MIRRORS)
      .filter(
        ([room, mirror]) => !tests.some((f) => ownerIn(testRooms, f) === mirror && importedBy(f).some((t) => ownerIn(MIRRORS, t) === room)),
      )
      .map(([room, mirror]) => `${room} (${mirror})`);
    expect(untested).toEqual([]);
  });
});
