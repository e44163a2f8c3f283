// What the docs tests read of a Markdown page: its links, its headings'
// anchors (as GitHub makes them) and its fenced code blocks. Small on
// purpose: the pages are ours, written in plain CommonMark.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");

/** The pages a reader moves between: the README, every page of docs/, and the READMEs they lead to. */
export function pages(): string[] {
  const docs = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? docs(join(dir, e.name)) : e.name.endsWith(".md") ? [join(dir, e.name)] : [],
    );
  return ["README.md", ...docs("docs"), "examples/plugins/README.md", "deploy/README.md"].filter((p) => existsSync(join(ROOT, p)));
}

export const read = (page: string) => readFileSync(join(ROOT, page), "utf8");

export interface CodeBlock {
  lang: string;
  text: string;
  /** the line of the opening fence, from 1 */
  line: number;
}

/** Fenced code blocks (```), and the text outside them. */
export function splitCode(md: string): { blocks: CodeBlock[]; prose: string } {
  const blocks: CodeBlock[] = [];
  const prose: string[] = [];
  let open: CodeBlock | undefined;
  md.split("\n").forEach((l, i) => {
    const fence = /^\s*```(\S*)/.exec(l);
    if (fence && !open) open = { lang: fence[1], text: "", line: i + 1 };
    else if (fence && open) {
      blocks.push(open);
      open = undefined;
    } else if (open) open.text += `${l}\n`;
    else prose.push(l);
  });
  return { blocks, prose: prose.join("\n") };
}

/** Link targets of a page's prose: `[text](target)`, inline code left out. */
export function links(md: string): string[] {
  const prose = splitCode(md).prose.replace(/`[^`\n]*`/g, "");
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes; repeats get -1, -2, ... */
export function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of splitCode(md).prose.split("\n")) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!h) continue;
    const base = h[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

/** A link's target from the repository root, and its anchor. */
export function resolveLink(page: string, target: string): { path: string; anchor: string } {
  const [file, anchor = ""] = target.split("#");
  const path = file === "" ? page : relative(ROOT, resolve(ROOT, page, "..", file));
  return { path, anchor };
}
