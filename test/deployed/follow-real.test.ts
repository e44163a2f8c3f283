// kpng follows a real API server after start-up (the P0 of issue 33): the
// whole process with an operator's flags and nothing more (--kubeconfig,
// --node-name, --backend; default content type: protobuf), against the real
// kube-apiserver 1.36.2 + etcd (test/harness/kube-apiserver.ts). A Service and
// its EndpointSlice created with kubectl *after* the first sync must answer a
// client outside the node; an endpoint change, a port change and the delete
// must follow. Once per mode: nft, iptables, ebpf, userspace, and a node
// agent (`kpng --api`) fed by `kpng serve`.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createSandbox, type Sandbox } from "../ebpf/sandbox.ts";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc } from "../fixtures/k8s.ts";
import { LOADED_WAIT_MS, startKpng, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer } from "../harness/kube-apiserver.ts";
import type { Topology } from "../harness/netns.ts";
import { NodeOnApi } from "../harness/node-on-api.ts";

const NODE = "node-a";
const IP = v4.clusterIP(40);

interface Mode {
  name: string;
  /** kpng's processes' arguments after the source flags; one list per process, the last one syncs the node */
  args(ctx: { kubeconfig: string; dir: string; sb?: Sandbox }): string[][];
  ebpf?: boolean;
}

const modes: Mode[] = [
  { name: "nft", args: ({ kubeconfig }) => [["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "nft"]] },
  { name: "iptables", args: ({ kubeconfig }) => [["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "iptables"]] },
  {
    name: "ebpf",
    ebpf: true,
    args: ({ kubeconfig, sb }) => [
      ["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "ebpf", "--ebpf-cgroup", sb!.cgroup, "--ebpf-pin-dir", sb!.pinDir],
    ],
  },
  { name: "userspace", args: ({ kubeconfig }) => [["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "userspace"]] },
  {
    name: "kpng serve + kpng --api (nft)",
    args: ({ kubeconfig, dir }) => [
      ["serve", "--kubeconfig", kubeconfig, "--listen", `unix://${join(dir, "brain.sock")}`],
      ["--api", `unix://${join(dir, "brain.sock")}`, "--node-name", NODE, "--backend", "nft"],
    ],
  },
];

const service = (port: number) =>
  svc({ name: "late", clusterIPs: [IP], ports: [{ name: "http", protocol: "TCP", port, targetPort: 8080 }] });
const endpoints = (topo: Topology, pod: number) =>
  slice({
    service: "late",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: [{ ip: topo.pods[pod].v4, node: NODE, pod: `pod${pod}` }],
  });

const real = haveK8s("kpng follows a real API server");

describe.skipIf(!real).each(modes)("default flags against the real kube-apiserver: $name", (mode) => {
  let topo: Topology;
  let api: KubeApiServer;
  let sb: Sandbox | undefined;
  const procs: KpngProcess[] = [];
  const rig = new NodeOnApi({ pods: 2, prefix: "kpf", node: NODE, dirPrefix: "kpng-follow-" });

  /** what the client outside the node sees of `port` on the Service's IP: the pod that answered, or the error */
  const once = async (port: number): Promise<string> => {
    const r = await topo.probe(topo.client.ns, { ip: IP, port, proto: "tcp", timeout: 1 });
    return r.ok ? r.who : r.error;
  };
  /** once(port) until it is `want` (bounded: 15 s); the last answer, with kpng's log when it is not */
  const answer = async (port: number, want: string): Promise<string> => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const got = await once(port);
      if (got === want) return got;
      if (performance.now() > end) return `${got}\n${procs.map((p) => p.stderr.slice(-10).join("\n")).join("\n")}`;
      await Bun.sleep(100);
    }
  };

  beforeAll(async () => {
    const { kubeconfig } = await rig.start();
    ({ topo, api } = rig);
    for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
    if (mode.ebpf) sb = await createSandbox();
    for (const args of mode.args({ kubeconfig, dir: rig.dir.path, sb })) {
      const p = startKpng(args, { wrap: ["ip", "netns", "exec", topo.node.ns] });
      procs.push(p);
      await p.waitFor(args[0] === "serve" ? /serving the API/ : / INFO kpng: synced /);
    }
  }, 90_000);

  afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    await sb?.destroy();
    await rig.close();
  });

  test("start-up against a healthy API server logs no WARN (the list is streamed, watch-list)", () => {
    // (oom_score_adj is refused in this sandbox: not the API server's doing)
    for (const p of procs) expect(p.stderr.filter((l) => / WARN /.test(l) && !/oom_score_adj/.test(l))).toEqual([]);
  });

  test("a Service created with kubectl after the first sync answers a client outside the node", async () => {
    expect(await once(80)).not.toStartWith("pod");
    await api.apply(service(80), endpoints(topo, 0));
    expect(await answer(80, "pod0")).toBe("pod0");
  });

  test("its endpoint moved to another pod: traffic follows", async () => {
    await api.apply(endpoints(topo, 1));
    expect(await answer(80, "pod1")).toBe("pod1");
  });

  test("its port changed with kubectl patch: the new port answers, the old one no more", async () => {
    await api.kubectl([
      "patch",
      "service",
      "late",
      "-n",
      "default",
      "--type=json",
      "-p",
      '[{"op":"replace","path":"/spec/ports/0/port","value":81}]',
    ]);
    expect(await answer(81, "pod1")).toBe("pod1");
    expect(await once(80)).not.toStartWith("pod");
  });

  test("deleted with kubectl: no answer any more", async () => {
    await api.kubectl(["delete", "service", "late", "-n", "default"]);
    await api.kubectl(["delete", "endpointslice", "late-ipv4", "-n", "default", "--ignore-not-found"]);
    const end = performance.now() + LOADED_WAIT_MS;
    while ((await once(81)).startsWith("pod") && performance.now() < end) await Bun.sleep(100);
    expect(await once(81)).not.toStartWith("pod");
    for (const p of procs) expect(p.stderr.filter((l) => /watch failed|cannot decode|undecodable/.test(l))).toEqual([]);
  });
});
