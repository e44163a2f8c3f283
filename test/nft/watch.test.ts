// The watch on kpng's tables (plugins/nft/watch.ts) and the runner's part in
// it (executor.ts), with a fake `nft monitor` that prints each transaction's
// statements back as the kernel's events, closed by "# new generation": how
// kpng's own commits are told from others', when the monitor runs, and what
// is reported. The real kernel: repair-real.test.ts.

import { describe, expect, test } from "bun:test";
import { NftRunner, type ApplyOptions } from "../../plugins/nft/executor.ts";
import { SYNC_STAMP_SET } from "../../plugins/nft/names.ts";
import type { SpawnHandlers, Spawner } from "../../plugins/nft/session.ts";
import { Transaction } from "../../plugins/nft/transaction.ts";
import { RulesWatch, firstWorking, type EventSource } from "../../plugins/nft/watch.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Executor } from "../../src/host/backend.ts";

function world(opts: { refuse?: (stdin: string) => boolean } = {}) {
  const monitors: Array<{ on: SpawnHandlers; alive: boolean }> = [];
  let gen = 0;
  /** one commit as `nft monitor` prints it */
  const commit = (lines: string[]) => {
    const text = lines.map((l) => `${l}\n`).join("") + `# new generation ${++gen} by process 4242 (nft)\n`;
    // delivered in two pieces, split inside a line
    for (const m of monitors) if (m.alive) m.on.stdout!(text.slice(0, 7)), m.on.stdout!(text.slice(7));
  };
  const sent: string[] = [];
  const monitorAtSend: boolean[] = [];
  const exec: Executor = {
    run: async (_argv, stdin = "") => {
      sent.push(stdin);
      monitorAtSend.push(monitors.some((m) => m.alive));
      if (opts.refuse?.(stdin)) throw new Error("nft: Error: Could not process rule: No such file or directory");
      commit(stdin.split("\n").filter(Boolean));
      return "";
    },
  };
  const spawner: Spawner = {
    spawn(_argv, on) {
      const m = { on, alive: true };
      monitors.push(m);
      return { write() {}, kill: () => void (m.alive = false) };
    },
  };
  const reports: string[] = [];
  const log = memoryLogger();
  const watch = new RulesWatch({ spawner, log, onForeign: (w) => reports.push(w) });
  const inner = new NftRunner(exec, undefined, log, watch);
  // each apply waits for the monitor's proof too
  const runner = {
    apply: async (t: Transaction, o?: ApplyOptions) => {
      await inner.apply(t, o);
      await inner.settled();
    },
  };
  /** the monitor process exits by itself */
  const crash = () => {
    const m = monitors.findLast((x) => x.alive)!;
    m.alive = false;
    m.on.exit(1);
  };
  return { runner, watch, commit, sent, monitorAtSend, monitors, reports, log, crash };
}

const tx = (...chains: string[]) => {
  const t = new Transaction();
  for (const name of chains) t.add({ kind: "chain", verb: "add", family: "ip", chain: { name } });
  return t;
};

describe("watch on kpng's tables (fake nft monitor)", () => {
  test("kpng's own commits carry a stamp and are not reported; another process's change to kpng's tables is", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    await w.runner.apply(tx("b"));
    await w.runner.apply(tx("c"));
    expect(w.reports).toEqual([]);
    w.commit(["add table ip other", "add chain ip other x"]);
    w.commit(["add table ip6 kpngx"]);
    expect(w.reports).toEqual([]);
    w.commit(["delete rule ip kpng services handle 7", "delete rule ip kpng services handle 8"]);
    w.commit(["delete table ip6 kpng"]);
    expect(w.reports).toEqual(["delete rule ip kpng services handle 7", "delete table ip6 kpng"]);
  });

  test("someone else's change while kpng commits nothing is reported at its first event, before the commit's end", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    w.monitors.at(-1)!.on.stdout!("delete rule ip kpng services handle 7\n");
    expect(w.reports).toEqual(["delete rule ip kpng services handle 7"]);
    w.monitors.at(-1)!.on.stdout!("delete rule ip kpng services handle 8\n# new generation 9 by process 1 (nft)\n");
    expect(w.reports).toHaveLength(1);
  });

  test("an old stamp replayed by someone else (a saved ruleset restored) is not taken for kpng's", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    const old = w.sent
      .at(-1)!
      .split("\n")
      .find((l) => l.startsWith(`add element ip kpng ${SYNC_STAMP_SET}`))!;
    w.commit(["add table ip kpng", "add chain ip kpng services", old]);
    expect(w.reports).toEqual(["add table ip kpng"]);
  });

  test("every transaction ends with the stamp: a full sync creates it, a partial one replaces the last (failing if it is gone), the monitor's proof changes nothing", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    await w.runner.apply(tx("b"));
    const [full, proof, partial] = w.sent;
    const set = `add set ip kpng ${SYNC_STAMP_SET} { type ifname; comment "the last transaction kpng committed"; }`;
    const el = (verb: string, v: string) => `${verb} element ip kpng ${SYNC_STAMP_SET} { ${v} }`;
    const s0 = /add element ip kpng sync-stamp \{ ("[^"]+") \}\n$/.exec(full)![1];
    expect(full.split("\n").slice(-3, -1)).toEqual([set, el("add", s0)]);
    const s1 = /add element ip kpng sync-stamp \{ ("[^"]+") \}\ndelete/.exec(proof)![1];
    expect(proof.split("\n").filter(Boolean)).toEqual([set, el("delete", s0), el("add", s0), el("add", s1), el("delete", s1)]);
    const s2 = /add element ip kpng sync-stamp \{ ("[^"]+") \}\n$/.exec(partial)![1];
    expect(partial).toBe(`add chain ip kpng b\n${set}\n${el("delete", s0)}\n${el("add", s2)}\n`);
    expect(new Set([s0, s1, s2]).size).toBe(3);
  });

  test("a full sync runs with the monitor stopped; a new one starts after, proved by a stamp it prints", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    await w.runner.apply(tx("b"), { full: true });
    // full (no monitor), proof (new monitor), full (stopped again), proof
    expect(w.monitorAtSend).toEqual([false, true, false, true]);
    expect(w.monitors.map((m) => m.alive)).toEqual([false, true]);
  });

  test("the monitor's proof after a full sync does not keep the sync's transaction alive (start-up collects the heap meanwhile)", async () => {
    // a monitor that prints nothing: the proof keeps waiting, as a real one does for its first fetch
    const spawner: Spawner = { spawn: () => ({ write() {}, kill() {} }) };
    const log = memoryLogger();
    const runner = new NftRunner({ run: async () => "" }, undefined, log, new RulesWatch({ spawner, log, onForeign() {} }));
    let proved = false;
    const applied = async () => {
      const t = tx(...Array.from({ length: 1000 }, (_, i) => `c${i}`));
      await runner.apply(t, { full: true });
      return new WeakRef(t);
    };
    const ref = await applied();
    void runner.settled().then(() => (proved = true));
    await new Promise((r) => setImmediate(r));
    Bun.gc(true);
    expect(proved).toBe(false);
    expect(ref.deref()).toBeUndefined();
    runner.close();
  });

  test("the stamp gone when the new monitor starts (the tables went meanwhile): reported", async () => {
    const w = world({ refuse: (s) => s.startsWith(`add set ip kpng ${SYNC_STAMP_SET}`) && s.includes("delete element") });
    await w.runner.apply(tx("a"), { full: true });
    expect(w.reports).toHaveLength(1);
    expect(w.reports[0]).toStartWith("kpng's sync stamp is gone: ");
  });

  test("events lost by the monitor (its socket overflowed): reported", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    w.commit(["# ERROR: We lost some netlink events!"]);
    expect(w.reports).toEqual(["# ERROR: We lost some netlink events!"]);
  });

  test("the monitor exiting is reported (unseen changes); after 3 exits in a row without a stamp seen, watching stops", async () => {
    const w = world();
    await w.runner.apply(tx("a"), { full: true });
    w.crash();
    expect(w.reports).toEqual(["nft monitor exited (1)"]);
    // the feed's full sync restarts it, and it works: the count starts over
    await w.runner.apply(tx("a"), { full: true });
    w.crash();
    w.watch.start();
    w.crash();
    expect(w.reports).toHaveLength(3);
    w.watch.start();
    w.crash();
    expect(w.reports).toHaveLength(3);
    expect(w.log.lines.some((l) => l.includes("ERROR") && l.includes("stopped watching"))).toBe(true);
    w.watch.start();
    expect(w.watch.running).toBe(false);
  });

  test("after a refused transaction the stamp in the kernel is unknown: the next one adds one without replacing", async () => {
    let refuse = false;
    const w = world({ refuse: () => refuse });
    await w.runner.apply(tx("a"), { full: true });
    refuse = true;
    await expect(w.runner.apply(tx("b"))).rejects.toThrow("No such file");
    refuse = false;
    await w.runner.apply(tx("c"));
    expect(w.sent.at(-1)).toStartWith("add chain ip kpng c\n");
    expect(w.sent.at(-1)).not.toContain("delete element");
  });

  test("cleanup's transaction (the tables removed) carries no stamp and starts no monitor", async () => {
    const w = world();
    const t = new Transaction();
    t.add({ kind: "table", verb: "delete", family: "ip" });
    await w.runner.apply(t, { full: true, unstamped: true });
    expect(w.sent).toEqual(["delete table ip kpng\n"]);
    expect(w.monitors).toHaveLength(0);
  });

  test("the netlink socket is used when it opens; where it cannot be, `nft monitor` from then on, and the log says which", () => {
    const opened: string[] = [];
    const source = (name: string, works: boolean): EventSource => ({
      name,
      listensAtOnce: name === "netlink",
      open() {
        if (!works) throw new Error("socket(AF_NETLINK) failed (errno 97)");
        opened.push(name);
        return { close() {} };
      },
    });
    for (const works of [true, false]) {
      const log = memoryLogger();
      const watch = new RulesWatch({
        source: firstWorking(source("netlink", works), source("nft monitor", true), log),
        log,
        onForeign() {},
      });
      watch.start();
      watch.stop();
      watch.start();
      expect(watch.running).toBe(true);
      expect(watch.listensAtOnce).toBe(works);
      const used = works ? "netlink" : "nft monitor";
      expect(opened.splice(0)).toEqual([used, used]);
      expect(log.lines.filter((l) => l.includes("watching kpng's tables through"))).toHaveLength(1);
      expect(log.lines.some((l) => l.includes(`watching kpng's tables through ${used}`))).toBe(true);
    }
  });
});
