// The docs hold together: every link between pages lands on a file and, with
// an anchor, on a heading of it; a path or a kpng command written in a code
// block exists; the README leads a newcomer to each task within two clicks;
// the plugin example on docs/plugins.md is the file the tests run.

import { describe, expect, test } from "bun:test";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { allFlags, currentHelps, parseHelp } from "../../docs/generate.ts";
import { anchors, links, pages, ROOT, read, resolveLink, splitCode } from "./markdown.ts";

const external = (target: string) => /^[a-z][\w+.-]*:/i.test(target);

describe("links between pages", () => {
  test("every link lands on a file, and on a heading when it names one", () => {
    const broken: string[] = [];
    for (const page of pages())
      for (const target of links(read(page))) {
        if (external(target)) continue;
        const { path, anchor } = resolveLink(page, target);
        if (!existsSync(join(ROOT, path))) {
          broken.push(`${page}: ${target}: no file ${path}`);
          continue;
        }
        if (anchor && path.endsWith(".md") && !anchors(read(path)).has(anchor)) broken.push(`${page}: ${target}: no heading #${anchor}`);
      }
    expect(broken).toEqual([]);
  });

  test("from the README, each newcomer's task is at most two clicks away", () => {
    // a link followed once from the README, or twice: "path#anchor" and "path"
    const reached = new Set<string>();
    let frontier = ["README.md"];
    for (let click = 0; click < 2; click++) {
      const next: string[] = [];
      for (const page of frontier)
        for (const target of links(read(page))) {
          if (external(target)) continue;
          const { path, anchor } = resolveLink(page, target);
          const file = existsSync(join(ROOT, path)) && statSync(join(ROOT, path)).isDirectory() ? join(path, "README.md") : path;
          reached.add(anchor ? `${file}#${anchor}` : file);
          if (file.endsWith(".md") && existsSync(join(ROOT, file))) next.push(file);
        }
      frontier = next;
    }
    const tasks = {
      install: "docs/operators.md#install-on-a-new-cluster",
      "replace kube-proxy": "docs/operators.md#replace-kube-proxy-in-a-running-cluster",
      "choose a backend": "docs/backends/README.md",
      "write a plugin": "docs/plugins.md",
      troubleshoot: "docs/troubleshooting.md",
    };
    expect(Object.entries(tasks).filter(([, where]) => !reached.has(where) && !reached.has(where.split("#")[0]))).toEqual([]);
  });
});

describe("code blocks", () => {
  const blocks = pages().flatMap((page) => splitCode(read(page)).blocks.map((b) => ({ page, ...b })));

  test("a repository path named in a code block exists", () => {
    const missing: string[] = [];
    for (const b of blocks)
      for (const m of b.text.matchAll(
        /(?<![\w./-])(?:\.\/)?((?:src|plugins|test|bench|examples|deploy|docs|proto|\.ci)\/[\w./-]*[\w/])/g,
      )) {
        if (!existsSync(join(ROOT, m[1]))) missing.push(`${b.page}:${b.line}: ${m[1]}`);
      }
    expect(missing).toEqual([]);
  });

  test("a kpng command in a code block names a subcommand and flags that exist", () => {
    const helps = currentHelps();
    const commands = new Set(
      [
        ...helps.kpng
          .split("Commands:")[1]
          .split("\n\n")[0]
          .matchAll(/^ {2}(\S+)/gm),
      ].map((m) => m[1]),
    );
    expect([...commands].sort()).toEqual(["backend", "get", "local", "serve", "verify"]);
    const flagsOf = (cmd: string) => new Set(parseHelp(helps[cmd] ?? helps.kpng).flatMap((f) => [`--${f.name}`, ...f.aliases]));
    const wrong: string[] = [];
    for (const b of blocks) {
      if (!["", "sh", "bash", "console"].includes(b.lang)) continue;
      const lines = b.text.replace(/\\\n/g, " ").split("\n");
      for (const line of lines) {
        const m = /(?:^\s*|--\s+|[;&|]\s*)(?:kpng|(?:npx\s+)?bun\s+src\/main\.ts)(?=\s|$)(.*)$/.exec(line);
        if (!m) continue;
        const words = m[1].split("#")[0].trim().split(/\s+/).filter(Boolean);
        const sub = words[0] && /^\w/.test(words[0]) ? words[0] : "kpng";
        if (sub !== "kpng" && !commands.has(sub)) {
          wrong.push(`${b.page}:${b.line}: kpng ${sub}: no such subcommand`);
          continue;
        }
        const known = flagsOf(sub);
        for (const w of words)
          for (const part of w.replace(/[[\]]/g, "").split("|")) {
            const flag = part.split("=")[0].replace(/\.\.\.$/, "");
            if (flag.startsWith("--") && flag.length > 2 && !known.has(flag))
              wrong.push(`${b.page}:${b.line}: kpng ${sub}: no flag ${flag}`);
          }
      }
    }
    expect(wrong).toEqual([]);
  });

  test("every flag --help lists is known to the page generator", () => {
    expect(allFlags(currentHelps()).length).toBeGreaterThan(50);
  });
});

describe("pages the code cites", () => {
  test("a docs page named in a comment of src/, plugins/, bench/, test/ or deploy/ exists", () => {
    const files = Bun.spawnSync(["git", "ls-files", "src", "plugins", "bench", "test", "deploy"], { cwd: ROOT })
      .stdout.toString()
      .split("\n")
      .filter((f) => /\.(ts|yaml|sh)$/.test(f));
    const missing: string[] = [];
    for (const f of files)
      for (const m of read(f).matchAll(/\bdocs\/[\w./-]*\.md\b/g)) if (!existsSync(join(ROOT, m[0]))) missing.push(`${f}: ${m[0]}`);
    expect(missing).toEqual([]);
  });
});

describe("the plugin example", () => {
  test("docs/plugins.md shows examples/plugins/jsonl-backend.ts as it is, and a test runs that file", () => {
    const page = read("docs/plugins.md");
    const shown = splitCode(page.split("## A complete example")[1] ?? "").blocks.find((b) => b.lang === "ts");
    expect(shown?.text).toBe(read("examples/plugins/jsonl-backend.ts"));
    expect(read("test/binary/suite.ts")).toContain('"examples/plugins/jsonl-backend.ts"');
  });
});
