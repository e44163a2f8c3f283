// localhostNodePorts as deployed: the whole kpng process in the node's
// namespace with only an operator's flags (`--input FILE --node-name N
// --backend iptables`, kube-proxy's default: on), then with
// `--iptables-localhost-nodeports=false`. Real packets from the node itself.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { slice, svc } from "../fixtures/k8s.ts";
import { type KpngProcess, startKpng, tempDir } from "../harness/kpng-process.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { v4 } from "../fixtures/addresses.ts";
import { asList, NODE, nodeObject } from "../deployed/cluster.ts";

// a test waits on its conditions up to LOADED_WAIT_MS each: 30 s + 60 s a wait, two by default
setDefaultTimeout(150_000);
const NODE_PORT = 30080;
let topo: Topology;
let kpng: KpngProcess | undefined;
const dir = tempDir("kpng-localhost-");
const input = join(dir.path, "cluster.json");

beforeAll(async () => {
  topo = await createTopology({ pods: 1, prefix: "kpld" });
  await topo.serve(topo.pods[0]!, { tcp: [8080] });
  dir.create();
  const http = { name: "http", protocol: "TCP" as const };
  writeFileSync(
    input,
    JSON.stringify(
      asList([
        nodeObject([topo.node.v4]),
        svc({
          name: "np",
          type: "NodePort",
          clusterIPs: [v4.clusterIP(10)],
          ports: [{ ...http, port: 80, targetPort: 8080, nodePort: NODE_PORT }],
        }),
        slice({ service: "np", ports: [{ ...http, port: 8080 }], endpoints: [{ ip: topo.pods[0]!.v4, node: NODE, pod: "pod0" }] }),
      ]),
    ),
  );
});

afterAll(async () => {
  await kpng?.stop();
  await topo?.destroy();
  dir.remove();
});

const start = async (extra: string[] = []) => {
  await kpng?.stop();
  kpng = startKpng(["--input", input, "--node-name", NODE, "--backend", "iptables", ...extra], {
    wrap: ["ip", "netns", "exec", topo.node.ns],
  });
  await kpng.waitFor(/ INFO kpng: synced /);
};
const localhost = () => topo.probe(topo.node.ns, { ip: "127.0.0.1", port: NODE_PORT, timeout: 2 });

describe("kpng --backend iptables: node ports on 127.0.0.1", () => {
  test("default (kube-proxy's: on): route_localnet=1 in the namespace, upstream's log line, 127.0.0.1 answers; no WARN", async () => {
    await start();
    expect(kpng!.stderr.join("\n")).toContain("Setting route_localnet=1 to allow node-ports on localhost");
    expect(kpng!.stderr.filter((l) => / WARN /.test(l) && /localhost/i.test(l))).toEqual([]);
    expect((await topo.exec(topo.node.ns, ["sysctl", "-n", "net.ipv4.conf.all.route_localnet"])).trim()).toBe("1");
    expect(await localhost()).toMatchObject({ ok: true, who: "pod0" });
    expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "filter"])).toContain(
      '-A INPUT -m comment --comment "kpng localnet guard" -j KPNG-LOCALNET-GUARD',
    );
  });

  test("kpng --cleanup removes the guard chain and its jumps with kpng's other rules", async () => {
    await start();
    expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "filter"])).toContain("KPNG-LOCALNET-GUARD");
    await kpng!.stop();
    kpng = undefined;
    const cleanup = startKpng(["--cleanup"], { wrap: ["ip", "netns", "exec", topo.node.ns] });
    expect(await cleanup.proc.exited).toBe(0);
    expect(await topo.exec(topo.node.ns, ["iptables-save"])).not.toContain("KPNG-");
  });

  test("--iptables-localhost-nodeports=false: refused, the guard removed; the node IP answers", async () => {
    await start(["--iptables-localhost-nodeports=false"]);
    expect(kpng!.stderr.join("\n")).not.toContain("Setting route_localnet=1");
    expect(await localhost()).toMatchObject({ ok: false, error: "refused" });
    expect(await topo.probe(topo.client.ns, { ip: topo.node.v4, port: NODE_PORT, timeout: 2 })).toMatchObject({ ok: true, who: "pod0" });
    expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "filter"])).not.toContain("KPNG-LOCALNET-GUARD");
  });
});
