// Failed syncs and repaired rules as Events on kpng's Node
// (src/core/node/backend-events.ts): the rate limit and the notes in
// process, then the whole process against the real kube-apiserver 1.36.2
// with a --plugin backend that fails its first sync and reports its rules
// lost on demand (events-plugin.ts); the events are read back with kubectl.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { BackendEvents, type NodeEventFields } from "../../src/core/node/backend-events.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { LOADED_WAIT_MS, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, sharedApiServer, type KubeApiServer } from "../harness/kube-apiserver.ts";
import { run } from "../harness/netns.ts";

describe("backend events in process", () => {
  const recorder = () => {
    const got: NodeEventFields[] = [];
    let now = 0;
    const ev = new BackendEvents({ record: async (f) => void got.push(f), intervalMs: 1000, now: () => now });
    return { got, ev, at: (ms: number) => (now = ms) };
  };

  test("a failed sync, then the full sync that repaired it: Warning SyncFailed, Normal RulesRestored", async () => {
    const { got, ev } = recorder();
    ev.synced("nft", true); // the first sync: nothing to restore
    ev.failed("nft", new Error("nft -f: refused"));
    ev.synced("nft", false); // a partial sync restores nothing kpng knows of
    ev.synced("nft", true);
    ev.synced("nft", true);
    await ev.flush();
    expect(got.map((f) => [f.type, f.reason, f.action])).toEqual([
      ["Warning", "SyncFailed", "SyncProxyRules"],
      ["Normal", "RulesRestored", "SyncProxyRules"],
    ]);
    expect(got[0].note).toBe("kpng backend nft: sync failed, retrying with a full sync: nft -f: refused");
  });

  test("rate limit: one event per reason and backend per interval, the held-back ones counted in the next", async () => {
    const { got, ev, at } = recorder();
    ev.rulesLost("nft", "table deleted");
    at(100);
    ev.rulesLost("nft", "table deleted");
    ev.rulesLost("nft", "table deleted");
    ev.rulesLost("iptables", "chain flushed"); // another backend: its own budget
    at(1200);
    ev.rulesLost("nft", "table deleted");
    await ev.flush();
    expect(got.map((f) => f.note)).toEqual([
      "kpng backend nft: its rules were changed by someone else (table deleted); resyncing everything",
      "kpng backend iptables: its rules were changed by someone else (chain flushed); resyncing everything",
      "kpng backend nft: its rules were changed by someone else (table deleted); resyncing everything (2 more since the last such event)",
    ]);
  });
});

const real = haveK8s("backend events against the real kube-apiserver");
const NODE = "node-events";

describe.skipIf(!real)("backend events on the Node (real kube-apiserver, kubectl get events)", () => {
  let api: KubeApiServer;
  let proc: KpngProcess;
  const netns = `kpev${Math.random().toString(36).slice(2, 7)}`;
  const dir = tempDir("kpng-bev-");
  const stops: Array<() => Promise<unknown>> = [];
  let lose = "";

  /** the core v1 view of the events on NODE: [type, reason, source component] */
  const nodeEvents = async () => {
    const list = JSON.parse(await api.kubectl(["get", "events", "-n", "default", "-o", "json"])) as {
      items: Array<{
        involvedObject: { kind: string; name: string };
        reason: string;
        type: string;
        reportingComponent: string;
        message: string;
      }>;
    };
    return list.items
      .filter((e) => e.involvedObject.kind === "Node" && e.involvedObject.name === NODE)
      .map((e) => [e.type, e.reason, e.reportingComponent]);
  };
  /** nodeEvents() until it holds `n` events (bounded: LOADED_WAIT_MS) */
  const eventsUntil = async (n: number) => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const evs = await nodeEvents();
      if (evs.length >= n || performance.now() > end) return evs;
      await Bun.sleep(250);
    }
  };

  beforeAll(async () => {
    dir.create();
    lose = join(dir.path, "lose");
    api = await sharedApiServer();
    await run(["ip", "netns", "add", netns]);
    await run(["ip", "-n", netns, "link", "set", "lo", "up"]);
    stops.push(await api.reach(netns));
    await api.apply(
      node(NODE, { ips: [v4.node(2)] }),
      svc({ ns: "kpng-bev", name: "web", clusterIPs: [v4.clusterIP(237)] }),
      slice({ ns: "kpng-bev", endpoints: [{ ip: v4.pod(1, 237), node: NODE }] }),
    );
    const kubeconfig = api.writeKubeconfig(join(dir.path, "kubeconfig"), { server: "https://127.0.0.1:6443" });
    proc = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--plugin", join(import.meta.dir, "events-plugin.ts")], {
      wrap: ["ip", "netns", "exec", netns],
      env: { KPNG_TEST_LOSE: lose },
    });
    await proc.waitFor(/ INFO kpng: synced /);
  }, 150_000);

  afterAll(async () => {
    await proc?.stop("SIGKILL");
    for (const s of stops) await s();
    await api?.kubectl(["delete", "namespace", "kpng-bev", "--wait=false", "--ignore-not-found"]).catch(() => {});
    await run(["ip", "netns", "del", netns]).catch(() => {});
    dir.remove();
  });

  test("the first sync refused, the retry's full sync: SyncFailed then RulesRestored, by kpng", async () => {
    expect(await eventsUntil(2)).toEqual([
      ["Warning", "SyncFailed", "kpng"],
      ["Normal", "RulesRestored", "kpng"],
    ]);
  }, 90_000);

  test("rules lost twice in a row: one RulesLost event (rate-limited), the repair logged", async () => {
    writeFileSync(lose, "");
    await proc.waitFor(/rules changed by someone else/);
    writeFileSync(lose, "");
    const end = performance.now() + LOADED_WAIT_MS;
    while (proc.stderr.filter((l) => /rules changed by someone else/.test(l)).length < 2 && performance.now() < end) await Bun.sleep(100);
    const evs = await eventsUntil(3);
    expect(evs.filter(([, reason]) => reason === "RulesLost")).toEqual([["Warning", "RulesLost", "kpng"]]);
    expect(proc.stderr.filter((l) => /could not record event/.test(l))).toEqual([]);
  }, 210_000);
});
