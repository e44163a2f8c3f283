// The first restore streams: iptables-restore reads the nat table's lines
// while the services still render (render-restore.ts streamRestore). Its
// text is the printed restore with the nat block first (bulk preamble
// always); a restore over rules kpng already holds is printed whole, in the
// printed order; invalid rules stop the stream before any COMMIT; and in the
// kernel a streamed first restore leaves exactly what a printed one leaves.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Executor } from "../../src/host/backend.ts";
import { recordingExecutor, restoredMarker, spawnExecutor } from "../../plugins/iptables/executor.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { bulkPreamble, streamRestore, Transaction } from "../../plugins/iptables/render-restore.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { ep, svc, testContext, v4 } from "./fixtures.ts";

/** 300 services x 10 endpoints: past one streamed chunk of the nat body */
function fill(b: IptablesBackend) {
  for (let i = 0; i < 300; i++) {
    b.setService(svc({ name: `s${i}`, clusterIPs: [v4.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] }));
    for (let e = 0; e < 10; e++) b.setEndpoint("default", `s${i}`, `e${e}`, ep({ ips: [v4.pod(i & 255, e)], ports: { http: 8080 } }));
  }
}

/** a recorder that also takes streamed input, keeping each chunk */
function streamingRecorder() {
  const rec = recordingExecutor();
  const chunks: string[][] = [];
  const exec: Required<Executor> = {
    run: rec.run,
    async stream(argv, input) {
      const got = await Promise.all([...input]);
      chunks.push(got);
      return rec.run(argv, got.join(""));
    },
  };
  return { rec, exec, chunks };
}

/** a restore's table blocks by table name */
const blocks = (text: string) => new Map(text.split(/(?=^\*)/m).map((b) => [b.slice(1, b.indexOf("\n")), b]));

describe("a first restore, streamed", () => {
  test("its chunks joined are the printed restore with the nat block first, its bulk preamble always", async () => {
    const plain = recordingExecutor();
    const printed = new IptablesBackend(testContext(), { executor: plain, families: ["v4"], monitorPeriodMs: 0 });
    const { rec, exec, chunks } = streamingRecorder();
    const streamed = new IptablesBackend(testContext(), { executor: exec, families: ["v4"], monitorPeriodMs: 0 });
    fill(printed);
    fill(streamed);
    await printed.sync();
    await streamed.sync();
    const want = plain.restores("v4")[0];
    const got = rec.restores("v4")[0];
    expect(chunks[0].length).toBeGreaterThan(1); // the nat body went out in more than one piece
    expect(got.startsWith(["*nat", ...bulkPreamble("nat"), ""].join("\n"))).toBe(true);
    const [w, g] = [blocks(want), blocks(got)];
    expect([...g.keys()]).toEqual(["nat", "mangle", "filter"]);
    for (const table of ["nat", "filter", "mangle"]) expect(g.get(table)).toBe(w.get(table)!);
  });

  test("over rules kpng already holds, the full restore is printed whole, filter first (held only at its first COMMIT for the hairpin set)", async () => {
    const { rec, exec, chunks } = streamingRecorder();
    const held = (c: { argv: string[] }) => (c.argv[0] === "iptables-save" ? "*nat\n:KPNG-SERVICES - [0:0]\nCOMMIT\n" : "");
    const inner = recordingExecutor(held);
    const b = new IptablesBackend(testContext(), {
      executor: { run: inner.run, stream: exec.stream },
      families: ["v4"],
      monitorPeriodMs: 0,
    });
    fill(b);
    await b.sync();
    const text = rec.restores("v4")[0];
    expect(text.indexOf("*filter")).toBeLessThan(text.indexOf("*nat"));
    // the text up to its first COMMIT, the rest once the set exists, the marker (executor.ts)
    expect(chunks).toEqual([
      [text.slice(0, text.indexOf("\nCOMMIT\n") + 1), text.slice(text.indexOf("\nCOMMIT\n") + 1), `${restoredMarker}\n`],
    ]);
    expect(inner.restores("v4")).toEqual([]);
  });

  test("a streamed restore that fails (the preamble's -S, before the rest was read) runs again whole, without the preamble", async () => {
    const rec = recordingExecutor();
    const ctx = testContext();
    const exec: Required<Executor> = {
      run: rec.run,
      async stream(argv, input) {
        // the hairpin set's fill streams too (render-ipset.ts StreamedFill): taken whole
        if (!argv[0].endsWith("-restore")) return rec.run(argv, (await Promise.all([...input])).join(""));
        input[Symbol.iterator]().next(); // read the first chunk only, then fail, as iptables-nft on a chain it cannot parse
        throw new Error(`${argv[0]}: exit 1: line 5 failed`);
      },
    };
    const b = new IptablesBackend(ctx, { executor: exec, families: ["v4"], monitorPeriodMs: 0 });
    fill(b);
    await b.sync();
    const [whole] = rec.restores("v4");
    expect(whole).not.toContain("\n-S\n");
    expect(whole.match(/^:KPNG-SVC-/gm)).toHaveLength(300); // every service rendered, to the end
    expect(ctx.log.lines.some((l) => l.includes("bulk restore failed, retrying without the bulk preamble"))).toBe(true);
  });

  test("after setup, the first sync runs one ipset, the set's fill, started before the restore's last piece (its COMMIT)", async () => {
    // Each program takes its input a chunk at a time, as through a pipe; one timeline of what each got.
    const seen: string[] = [];
    const texts = new Map<string, string>();
    const rec = recordingExecutor();
    const exec: Required<Executor> = {
      async run(argv, stdin, opts) {
        seen.push(`${argv[0]} run`);
        return rec.run(argv, stdin, opts);
      },
      async stream(argv, input) {
        let text = "";
        seen.push(`${argv[0]} start`);
        for (const chunk of input) {
          const got = await chunk;
          text += got;
          seen.push(`${argv[0]} ${got.includes("COMMIT") ? "commit" : "chunk"}`);
          await Bun.sleep(0);
        }
        texts.set(argv[0], text);
        return "";
      },
    };
    const b = new IptablesBackend(testContext(), { executor: exec, families: ["v4"], monitorPeriodMs: 0 });
    await b.setup();
    const setupCalls = seen.length;
    for (let i = 0; i < 600; i++) {
      b.setService(svc({ name: `s${i}`, clusterIPs: [v4.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] }));
      for (let e = 0; e < 10; e++)
        b.setEndpoint("default", `s${i}`, `e${e}`, ep({ ips: [v4.pod(i & 255, e + 10 * (i >> 8))], ports: { http: 8080 } }));
    }
    await b.sync();
    const sync = seen.slice(setupCalls);
    // no `ipset` run of its own to create the set: setup has just made it
    expect(sync.filter((e) => e.startsWith("ipset "))).not.toContain("ipset run");
    // the fill started before the restore's COMMIT was written
    expect(sync.indexOf("ipset start")).toBeGreaterThan(-1);
    expect(sync.indexOf("ipset start")).toBeLessThan(sync.indexOf("iptables-restore commit"));
    // the fill is the whole set, swapped in
    const fill = texts.get("ipset")!;
    expect(fill.match(/^add KPNG-HAIRPIN-V4-NEW /gm)).toHaveLength(6000);
    expect(fill.endsWith("swap KPNG-HAIRPIN-V4-NEW KPNG-HAIRPIN-V4\ndestroy KPNG-HAIRPIN-V4-NEW\n")).toBe(true);
  });

  test("an invalid rule stops the stream before any COMMIT: nothing of the restore commits", () => {
    const tx = new Transaction();
    function* building() {
      for (let i = 0; i < 2000; i++) {
        tx.declare("nat", `KPNG-OK-${i}`);
        yield;
      }
      tx.declare("nat", "KPNG BAD NAME");
      yield;
    }
    const sent: string[] = [];
    expect(() => {
      for (const chunk of streamRestore(tx, building())) sent.push(chunk);
    }).toThrow(/KPNG BAD NAME/);
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.join("")).not.toContain("COMMIT");
  });
});

describe("a first restore, streamed, in the kernel", () => {
  let topo: Topology;
  beforeAll(async () => {
    topo = await createTopology({ pods: 0, prefix: "kpst" });
  });
  afterAll(async () => {
    await topo?.destroy();
  });

  const saved = async () =>
    (await topo.exec(topo.node.ns, ["iptables-save"]))
      .split("\n")
      .filter((l) => !l.startsWith("#"))
      .join("\n");

  test("leaves exactly what the printed restore leaves", async () => {
    const inner = spawnExecutor(["ip", "netns", "exec", topo.node.ns]);
    const load = async (exec: Executor) => {
      const b = new IptablesBackend(testContext(), { executor: exec, families: ["v4"], monitorPeriodMs: 0 });
      await b.setup();
      fill(b);
      await b.sync();
      return b;
    };
    const printed = await load({ run: inner.run });
    const want = await saved();
    await printed.cleanup();
    expect(await saved()).not.toContain("KPNG-");
    await load(inner);
    expect(await saved()).toBe(want);
  });
});
