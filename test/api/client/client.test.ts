// kpng's client library against a real `kpng serve`: several watchers, both
// protocols, a brain restart, and the run() helper's --once and signals.

import { toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Brain, type Revision } from "../../../src/core/brain/brain.ts";
import { watchStates } from "../../../src/core/api/client/index.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { startFileSource } from "../../../src/core/sources/file.ts";
import type { NodeState } from "../../../src/core/brain/state.ts";
import { EndpointSchema, ServiceSchema } from "../../../src/gen/localv1/services_pb.ts";
import { loadedBound } from "../../harness/load.ts";
import { BUN, LOADED_WAIT_MS, ROOT, startServe, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";

// a test (or hook) waits on its conditions up to LOADED_WAIT_MS each: 30 s + 60 s a wait, two by default
setDefaultTimeout(150_000);
const dir = tempDir("kpng-client-");
const input = join(dir.path, "cluster.yaml");
const procs: KpngProcess[] = [];
let sockN = 0;
const newSock = () => join(dir.path, `api-${++sockN}.sock`);
const serve = async (sock: string) => {
  const p = await startServe(["--input", input, "--listen", `unix://${sock}`]);
  procs.push(p);
  return p;
};

beforeAll(() => {
  dir.create();
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
});
afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  dir.remove();
});

async function expectedState(node: string): Promise<NodeState> {
  const brain = new Brain();
  (await startFileSource({ path: input, brain, log: memoryLogger(), watch: false })).close();
  return brain.view(node).state!;
}

/** A state as comparable data: services and endpoints by key, as wire bytes. */
const wire = (s: NodeState) =>
  Object.fromEntries(
    [...s.services].map(([k, se]) => [
      k,
      {
        service: Buffer.from(toBinary(ServiceSchema, se.service)).toString("hex"),
        endpoints: Object.fromEntries([...se.endpoints].map(([e, ep]) => [e, Buffer.from(toBinary(EndpointSchema, ep)).toString("hex")])),
      },
    ]),
  );

/** Collects revisions; `until(n)` resolves when n have arrived. */
function collect(opts: { api: string; nodeName: string; protocol?: "watch" | "next" }) {
  const ac = new AbortController();
  const revs: Revision[] = [];
  let wake = () => {};
  const log = memoryLogger();
  const done = (async () => {
    for await (const r of watchStates({ ...opts, retryMs: 100, signal: ac.signal, log })) {
      revs.push(r);
      wake();
    }
  })();
  return {
    revs,
    log,
    async until(n: number, timeoutMs = LOADED_WAIT_MS) {
      const deadline = Date.now() + timeoutMs;
      while (revs.length < n) {
        if (Date.now() > deadline) throw new Error(`only ${revs.length} revisions; log:\n${log.lines.join("\n")}`);
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 50);
        });
      }
      return revs[n - 1];
    },
    async stop() {
      ac.abort();
      await done;
    },
  };
}

describe("watchers", () => {
  let sock: string;
  beforeAll(async () => {
    sock = newSock();
    await serve(sock);
  });

  test("several concurrent watchers on different node names each get their node's state", async () => {
    const nodes = ["node-1", "node-2", "node-3"];
    const watchers = nodes.map((nodeName) => collect({ api: `unix://${sock}`, nodeName }));
    const got = await Promise.all(watchers.map((w) => w.until(1)));
    await Promise.all(watchers.map((w) => w.stop()));
    for (const [i, node] of nodes.entries()) {
      expect(got[i].change).toBeNull();
      expect(wire(got[i].state)).toEqual(wire(await expectedState(node)));
    }
    // Local endpoints differ per node, so the three answers are not one state.
    expect(new Set(got.map((r) => JSON.stringify(wire(r.state)))).size).toBe(3);
  });

  test("the Next protocol gives the same state as Watch", async () => {
    const w = collect({ api: `unix://${sock}`, nodeName: "node-3", protocol: "next" });
    const rev = await w.until(1);
    await w.stop();
    expect(wire(rev.state)).toEqual(wire(await expectedState("node-3")));
  });
});

describe("a brain restart mid-watch", () => {
  for (const protocol of ["watch", "next"] as const) {
    test(`${protocol}: nothing when nothing changed; then exactly the changed services`, async () => {
      const sock = newSock();
      let brain = await serve(sock);
      const w = collect({ api: `unix://${sock}`, nodeName: "node-1", protocol });
      const first = await w.until(1);
      await brain.stop();
      brain = await serve(sock);
      const text = readFileSync(input, "utf8");
      // The restarted brain has the same state: the client must stay silent. Prove it
      // has reconnected by then making one change and seeing it as the next revision.
      await waitForLine(w.log.lines, /connected/, 2);
      writeFileSync(input, text.replace("port: 8080\n          targetPort: 8080", "port: 8081\n          targetPort: 8080"));
      try {
        const second = await w.until(2);
        expect([...second.change!]).toEqual(["shop/api"]);
        for (const [k, se] of second.state.services) if (k !== "shop/api") expect(se).toBe(first.state.services.get(k)!);
        expect(wire(second.state)).toEqual(wire(await expectedState("node-1")));
      } finally {
        writeFileSync(input, text);
        await w.stop();
        await brain.stop();
      }
      expect(w.revs.length).toBeGreaterThanOrEqual(2);
      // five loaded waits: two starts of the brain, two revisions, the reconnection
    }, 330_000);
  }
});

async function waitForLine(lines: string[], re: RegExp, n: number, timeoutMs = LOADED_WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  while (lines.filter((l) => re.test(l)).length < n) {
    if (Date.now() > deadline) throw new Error(`no ${n}x ${re} in:\n${lines.join("\n")}`);
    await Bun.sleep(25);
  }
}

describe("run(), the example client (examples/plugins/print-changes.ts)", () => {
  let sock: string;
  beforeAll(async () => {
    sock = newSock();
    await serve(sock);
  });
  const example = (args: string[]) =>
    Bun.spawn([BUN, join(ROOT, "examples/plugins/print-changes.ts"), "--api", `unix://${sock}`, ...args], {
      cwd: ROOT,
      stdout: "pipe",
      stderr: "pipe",
    });

  test("--once: prints the first state and exits 0", async () => {
    const p = example(["--node-name", "node-1", "--once"]);
    expect(await p.exited).toBe(0);
    const want = await expectedState("node-1");
    expect((await new Response(p.stdout).text()).trim()).toBe(
      `rev=1 node=node-1 services=${want.services.size} endpoints=${[...want.services.values()].reduce((n, s) => n + s.endpoints.size, 0)} changed=all`,
    );
  });

  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    test(`${signal}: stops and exits 0 at once`, async () => {
      const p = example(["--node-name", "node-2"]);
      const reader = p.stdout.getReader();
      await reader.read(); // the first state is printed
      const t0 = performance.now();
      p.kill(signal);
      expect(await p.exited).toBe(0);
      // the promise: within 2 s of the signal on a machine with a core to spare
      expect(performance.now() - t0).toBeLessThan(loadedBound(2000));
    });
  }
});
