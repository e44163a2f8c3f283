// docs/configuration.md lists every flag and every configuration field, and
// is generated (`bun run docs`, docs/generate.ts): these fail when a flag is
// added to --help and the page was not made again, or the page names a flag
// --help does not have.

import { describe, expect, test } from "bun:test";
import { allFlags, currentHelps, MARKER, renderPage } from "../../docs/generate.ts";
import { read } from "./markdown.ts";

describe("docs/configuration.md against --help", () => {
  const helps = currentHelps();
  const page = read("docs/configuration.md");
  const generated = page.split(MARKER)[1] ?? "";
  // the first cell of each table row: the flag and its other names
  const onPage = new Set([...generated.matchAll(/^\| (`-.*?) \|/gm)].flatMap((m) => [...m[1].matchAll(/`(-[^`]+)`/g)].map((x) => x[1])));
  const inHelp = new Set(allFlags(helps).flatMap((f) => [`--${f.name}`, ...f.aliases]));

  test("every flag of --help is on the page", () => {
    expect([...inHelp].filter((f) => !onPage.has(f))).toEqual([]);
  });

  test("every flag on the page is in --help", () => {
    expect(onPage.size).toBeGreaterThan(50);
    expect([...onPage].filter((f) => !inHelp.has(f))).toEqual([]);
  });

  test("the generated part is current (else: bun run docs)", () => {
    expect(page).toBe(renderPage(page, helps));
  });
});
