// Issue 39 as deployed: the whole kpng process with an operator's flags
// (--kubeconfig, --node-name, --backend userspace: bind mode) against the
// real kube-apiserver + etcd (test/harness/kube-apiserver.ts), and a Service
// whose external IP is the node's own IP, created, patched and deleted with
// kubectl. At each step the node's local table keeps the kernel's routes
// (`local <node IP> dev ext0 proto kernel`), the node reaches its own
// addresses, kpng holds no route for the node IP, and a client outside the
// node reaches the Service where it should. Then kill -9 with the Service
// there, its delete while kpng is down, a restart, and --cleanup.
// Before the fix the first step already failed: kpng's `route replace` took
// the kernel's route over, and the delete took it away.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc } from "../fixtures/k8s.ts";
import { LOADED_WAIT_MS, startKpng, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer } from "../harness/kube-apiserver.ts";
import type { Topology } from "../harness/netns.ts";
import { NodeOnApi } from "../harness/node-on-api.ts";
import { localTable, tableProblems } from "./local-table.ts";

// a test waits on its conditions up to LOADED_WAIT_MS each: 30 s + 60 s a wait, three by default
setDefaultTimeout(210_000);
const NODE = "node-a";
const CIP = v4.clusterIP(41);
const EXT = v4.external(41);
const ourRoute = (ip: string) => `local ${ip} dev lo proto 156 scope host`;
/** kpng's routes before the Service (the API server's own `kubernetes` Service has one), plus `ips`' */
let base: string[] = [];
const withOurs = (...ips: string[]) => [...base, ...ips.map(ourRoute)].sort();

const real = haveK8s("userspace bind mode with external IPs equal to the node IP");

describe.skipIf(!real)("userspace bind mode against the real kube-apiserver: an external IP equal to the node IP (issue 39)", () => {
  let topo: Topology;
  let api: KubeApiServer;
  let kpng: KpngProcess | undefined;
  let kernel: string[];
  const rig = new NodeOnApi({ pods: 1, prefix: "kpor", node: NODE, dirPrefix: "kpng-own-routes-" });
  let kubeconfig = "";

  const startProxy = async () => {
    kpng = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "userspace"], {
      wrap: ["ip", "netns", "exec", topo.node.ns],
    });
    await kpng.waitFor(/ INFO kpng: synced /);
  };
  const service = (externalIPs: string[]) =>
    svc({ name: "self", clusterIPs: [CIP], externalIPs, ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] });
  const patchExternalIPs = (ips: string[]) =>
    api.kubectl(["patch", "service", "self", "-n", "default", "--type=merge", "-p", JSON.stringify({ spec: { externalIPs: ips } })]);
  const deleteService = async () => {
    await api.kubectl(["delete", "service", "self", "-n", "default"]);
    await api.kubectl(["delete", "endpointslice", "self-ipv4", "-n", "default", "--ignore-not-found"]);
  };

  /** what a client outside the node sees of `ip`:80: the pod that answered, or the error */
  const once = async (ip: string): Promise<string> => {
    const r = await topo.probe(topo.client.ns, { ip, port: 80, proto: "tcp", timeout: 1 });
    return r.ok ? r.who : r.error;
  };
  /** once(ip) until `ok(answer)` (bounded: LOADED_WAIT_MS); the last answer */
  const until = async (ip: string, ok: (answer: string) => boolean): Promise<string> => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const got = await once(ip);
      if (ok(got) || performance.now() > end) return got;
      await Bun.sleep(100);
    }
  };
  const answers = (ip: string) => until(ip, (a) => a === "pod0");
  const silent = async (ip: string) => ((await until(ip, (a) => !a.startsWith("pod"))).startsWith("pod") ? "pod0" : "no answer");
  /** kpng's routes until they are `want` (bounded: LOADED_WAIT_MS; a sync may follow the client's answer by a little) */
  const ours = async (want: string[]): Promise<string[]> => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const got = await localTable(topo.node.ns, true);
      if (JSON.stringify(got) === JSON.stringify(want) || performance.now() > end) return got;
      await Bun.sleep(100);
    }
  };
  const problems = (step: string) => tableProblems(topo.node.ns, step, { kernel, own: [topo.node.v4, topo.node.v6] });

  beforeAll(async () => {
    ({ topo, api, kubeconfig } = await rig.start());
    await topo.serve(topo.pods[0], { tcp: [8080] });
    kernel = await localTable(topo.node.ns, false);
    await startProxy();
    base = await localTable(topo.node.ns, true);
  }, 150_000);

  afterAll(async () => {
    await kpng?.stop("SIGKILL");
    await rig.close();
  });

  test("kubectl apply: the Service answers on the node IP; the kernel's route for it stays, kpng adds none", async () => {
    expect(kernel).toContain(`local ${topo.node.v4} dev ext0 proto kernel scope host src ${topo.node.v4}`);
    await api.apply(service([topo.node.v4]), slice({ service: "self", endpoints: [{ ip: topo.pods[0].v4, node: NODE, pod: "pod0" }] }));
    expect(await answers(topo.node.v4)).toBe("pod0");
    expect(await ours(withOurs(CIP))).toEqual(withOurs(CIP));
    expect(await problems("created")).toEqual([]);
  });

  test("kubectl patch: a second external IP gets kpng's route; the node IP still none", async () => {
    await patchExternalIPs([topo.node.v4, EXT]);
    expect(await answers(EXT)).toBe("pod0");
    expect(await answers(topo.node.v4)).toBe("pod0");
    expect(await ours(withOurs(CIP, EXT))).toEqual(withOurs(CIP, EXT));
    expect(await problems("patched: two external IPs")).toEqual([]);
  });

  test("kubectl patch: the node IP is no external IP any more; the node keeps its route", async () => {
    await patchExternalIPs([EXT]);
    expect(await silent(topo.node.v4)).toBe("no answer");
    expect(await answers(EXT)).toBe("pod0");
    expect(await problems("patched: the node IP left")).toEqual([]);
    await patchExternalIPs([topo.node.v4]);
    expect(await answers(topo.node.v4)).toBe("pod0");
    expect(await ours(withOurs(CIP))).toEqual(withOurs(CIP));
    expect(await problems("patched: the node IP back, the other gone")).toEqual([]);
  });

  test("kubectl delete: no answer any more, kpng's routes gone, the kernel's all there", async () => {
    await deleteService();
    expect(await silent(topo.node.v4)).toBe("no answer");
    expect(await ours(withOurs())).toEqual(withOurs());
    expect(await problems("deleted")).toEqual([]);
  });

  test("kill -9 with the Service there, deleted while kpng is down, kpng restarted; then --cleanup", async () => {
    await api.apply(
      service([topo.node.v4, EXT]),
      slice({ service: "self", endpoints: [{ ip: topo.pods[0].v4, node: NODE, pod: "pod0" }] }),
    );
    expect(await answers(topo.node.v4)).toBe("pod0");
    expect(await answers(EXT)).toBe("pod0");
    await kpng!.stop("SIGKILL");
    await deleteService();
    await startProxy();
    expect(await ours(withOurs())).toEqual(withOurs());
    expect(await problems("deleted while kpng was down, kpng restarted")).toEqual([]);

    await api.apply(
      service([topo.node.v4, EXT]),
      slice({ service: "self", endpoints: [{ ip: topo.pods[0].v4, node: NODE, pod: "pod0" }] }),
    );
    expect(await answers(topo.node.v4)).toBe("pod0");
    await kpng!.stop("SIGKILL");
    const cleanup = startKpng(["--cleanup", "--backend", "userspace"], { wrap: ["ip", "netns", "exec", topo.node.ns] });
    expect(await cleanup.proc.exited).toBe(0);
    expect(await localTable(topo.node.ns, true)).toEqual([]);
    expect(await problems("--cleanup")).toEqual([]);
    // five loaded waits
  }, 330_000);
});
