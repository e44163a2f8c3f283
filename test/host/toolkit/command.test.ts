// runCommand (the one way backends run programs): a program's work may be
// done before its exit (`doneAt`: iptables-restore echoing a marker after its
// last COMMIT, then closing its netlink socket slowly), and streamed stdin
// may hold chunks not known yet (promises, written once they resolve).

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCommand } from "../../../src/host/toolkit/command.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A file the program waits for before it goes on (`gate` in its script): proof that it has not exited yet. */
function gate() {
  const dir = mkdtempSync(join(tmpdir(), "kpng-cmd-"));
  dirs.push(dir);
  const file = join(dir, "go");
  // the loop also ends when the directory goes (afterEach), so no program outlives its test
  return { wait: `while [ -d ${dir} ] && [ ! -e ${file} ]; do sleep 0.02; done`, open: () => writeFileSync(file, ""), file };
}

describe("runCommand doneAt", () => {
  test("settles with code 0 and the output so far once the line is printed, while the program still runs", async () => {
    const g = gate();
    const r = await runCommand(["sh", "-c", `echo first; echo '# done'; ${g.wait}; echo late; exit 3`], undefined, { doneAt: "# done" });
    expect(r).toEqual({ code: 0, stdout: "first\n# done\n", stderr: "" });
    expect(existsSync(g.file)).toBe(false); // the program is still waiting: it cannot have exited
    g.open();
  });

  test("a line cut across two writes is found", async () => {
    const g = gate();
    const r = await runCommand(["sh", "-c", `printf 'a\\n# do'; sleep 0.05; printf 'ne\\nrest'; ${g.wait}`], undefined, {
      doneAt: "# done",
    });
    expect(r.stdout).toBe("a\n# done\n");
    g.open();
  });

  test("without the line (not printed, or only inside a longer line) the exit settles, with its code and all output", async () => {
    expect(await runCommand(["sh", "-c", "echo 'x # done'; echo '# done y' >&2; exit 4"], undefined, { doneAt: "# done" })).toEqual({
      code: 4,
      stdout: "x # done\n",
      stderr: "# done y\n",
    });
  });

  test("a long output before the line is kept whole", async () => {
    const r = await runCommand(["sh", "-c", "seq 1 200000; echo '# done'"], undefined, { doneAt: "# done" });
    expect(r.stdout.split("\n").length).toBe(200002);
    expect(r.stdout.endsWith("200000\n# done\n")).toBe(true);
  });
});

describe("runCommand streamed stdin", () => {
  test("a promised chunk is written once it resolves, in its place", async () => {
    let resolve = (_: string) => {};
    const later = new Promise<string>((r) => (resolve = r));
    setTimeout(() => resolve("b\n"), 50);
    expect((await runCommand(["cat"], ["a\n", later, "c\n"])).stdout).toBe("a\nb\nc\n");
  });

  test("a rejected chunk ends stdin there and is what runCommand throws", async () => {
    const refused = Promise.reject(new Error("members refused"));
    refused.catch(() => {});
    await expect(runCommand(["cat"], ["a\n", refused, "c\n"])).rejects.toThrow("members refused");
  });
});
