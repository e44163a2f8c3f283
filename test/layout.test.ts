// The README's Layout section is a map of the tree: every folder it names
// exists, and every folder a reader could open (each folder of src/ and
// plugins/, and each top-level room elsewhere) is on it. A new room, a
// moved or a deleted one fails here until the map says so too.

import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

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

/** the folders git tracks files in, with their parents */
function trackedFolders(): string[] {
  const files = Bun.spawnSync(["git", "ls-files"], { cwd: ROOT }).stdout.toString().trim().split("\n");
  const dirs = new Set<string>();
  for (const f of files) {
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

describe("README Layout", () => {
  const entries = layoutEntries(readFileSync(join(ROOT, "README.md"), "utf8"));

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
    expect(trackedFolders().filter(mustBeNamed).filter((d) => !named.has(d))).toEqual([]);
  });
});
