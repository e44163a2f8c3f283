// kubeproxy_network_programming_duration_seconds through the real API server
// (issue 33): the whole kpng process (--backend nft) in a node namespace,
// following the real kube-apiserver 1.36.2 + etcd, and an EndpointSlice
// written with kubectl carrying endpoints.kubernetes.io/last-change-trigger-time
// (as the EndpointSlice controller writes it; this control plane has no
// controller, so the test writes it). Each slice change that changes what the
// node programs is observed once, from that trigger time to the sync that
// programmed it: the histogram's count grows by one and its sum by at least
// the trigger's age. /metrics is read inside the node namespace with curl.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc } from "../fixtures/k8s.ts";
import { LOADED_WAIT_MS, startKpng, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer } from "../harness/kube-apiserver.ts";
import type { Topology } from "../harness/netns.ts";
import { NodeOnApi } from "../harness/node-on-api.ts";
import { value } from "../node/prom-text.ts";

const NODE = "node-a";
const METRICS = "127.0.0.1:10249";
const TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time";
const COUNT = 'kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"}';
const SUM = 'kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv4"}';

const real = haveK8s("network programming latency against a real API server");

describe.skipIf(!real)("network programming latency, EndpointSlices written with kubectl to the real kube-apiserver", () => {
  let topo: Topology;
  let api: KubeApiServer;
  let kpng: KpngProcess;
  const rig = new NodeOnApi({ pods: 1, prefix: "kpl", node: NODE, dirPrefix: "kpng-npl-" });

  /** the slice of service "lat" with pod `i`'s address, its trigger time `ageMs` before now */
  const triggered = (i: number, ageMs: number) => {
    const s = slice({
      service: "lat",
      ports: [{ name: "http", protocol: "TCP", port: 8080 }],
      endpoints: [{ ip: v4.pod(1, i), node: NODE }],
    });
    const at = new Date(Date.now() - ageMs).toISOString().replace(/\.\d+Z$/, "Z"); // RFC 3339 seconds, as the controller writes it
    return { ...s, metadata: { ...s.metadata, annotations: { [TRIGGER]: at } } };
  };
  const metrics = async () => {
    const text = await topo.exec(topo.node.ns, ["curl", "-sf", `http://${METRICS}/metrics`]);
    return { count: value(text, COUNT) ?? 0, sum: value(text, SUM) ?? 0 };
  };
  /** the histogram once its count exceeds `than` (bounded: 20 s) */
  const grown = async (than: number) => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const m = await metrics();
      if (m.count > than || performance.now() > end) return m;
      await Bun.sleep(200);
    }
  };

  beforeAll(async () => {
    const { kubeconfig } = await rig.start();
    ({ topo, api } = rig);
    kpng = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "nft", "--metrics-bind-address", METRICS], {
      wrap: ["ip", "netns", "exec", topo.node.ns],
    });
    await kpng.waitFor(/ INFO kpng: synced /);
    // the metrics server starts just after the first sync
    const end = performance.now() + LOADED_WAIT_MS;
    while (
      performance.now() < end &&
      !(await metrics().then(
        () => true,
        () => false,
      ))
    )
      await Bun.sleep(100);
  }, 90_000);

  afterAll(async () => {
    await kpng?.stop("SIGKILL");
    await rig.close();
  });

  test("a Service and its slice created with a trigger time 5 s old: one observation of at least 5 s", async () => {
    const before = await metrics();
    await api.apply(
      svc({ name: "lat", clusterIPs: [v4.clusterIP(43)], ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] }),
      triggered(5, 5_000),
    );
    const after = await grown(before.count);
    expect(after.count).toBe(before.count + 1);
    // at least the age the trigger had when kubectl wrote it (less a second: the annotation has whole seconds)
    expect(after.sum - before.sum).toBeGreaterThanOrEqual(4);
    expect(after.sum - before.sum).toBeLessThan(120);
  }, 90_000);

  test("the slice changed with kubectl (another endpoint, a newer trigger time 3 s old): observed once more", async () => {
    const before = await metrics();
    await api.apply(triggered(6, 3_000));
    const after = await grown(before.count);
    expect(after.count).toBe(before.count + 1);
    expect(after.sum - before.sum).toBeGreaterThanOrEqual(2);
    expect(after.sum - before.sum).toBeLessThan(120);
  }, 90_000);

  test("a slice change that leaves what the node programs as it was (a label) is not observed", async () => {
    const before = await metrics();
    const s = triggered(6, 1_000);
    s.metadata.labels = { ...s.metadata.labels, unrelated: "x" };
    await api.apply(s);
    // a later change that does program something: once it is in the rules, the label change (earlier) was seen, and not counted
    await api.apply(triggered(7, 1_000));
    const end = performance.now() + LOADED_WAIT_MS;
    while (!(await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kpng"])).includes(v4.pod(1, 7)) && performance.now() < end)
      await Bun.sleep(200);
    const after = await grown(before.count);
    expect(after.count).toBe(before.count + 1);
    expect(kpng.stderr.filter((l) => /watch failed|not decoded/.test(l))).toEqual([]);
  }, 150_000);
});
