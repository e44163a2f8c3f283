// Every command that reads the API server takes the same API-client flags
// (issue 33: `kpng serve` refused --kube-api-content-type, which the node
// mode takes). Against the real kube-apiserver 1.36.2 + etcd
// (test/harness/kube-apiserver.ts), as kube-proxy's user: `kpng serve` and
// `kpng local` asked for JSON read JSON (their "listed" lines say so) and
// follow / print a Service created with kubectl; `serve` also takes
// --kube-api-qps and --kube-api-burst as the node mode does (no effect, one
// WARN line).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { bufCurl } from "../harness/buf-curl.ts";
import { LOADED_WAIT_MS, startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";

const NODE = "node-a";
const JSON_TYPE = "application/json";
const real = haveK8s("API-client flags of every command against a real API server");

describe.skipIf(!real)("API-client flags on every command that reads the real API server", () => {
  const dir = tempDir("kpng-clientflags-");
  let api: KubeApiServer;
  let kubeconfig: string;
  const procs: KpngProcess[] = [];

  beforeAll(async () => {
    dir.create();
    api = await sharedApiServer();
    await api.apply(node(NODE, { ips: [v4.node(1)] }));
    kubeconfig = api.writeKubeconfig(join(dir.path, "kubeconfig"), { user: "kube-proxy" });
  }, 90_000);

  afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    dir.remove();
  });

  /** the GlobalServiceInfos paths `kpng serve` sends a new globalv1 stream, read by buf curl */
  const servedServices = async (sock: string): Promise<string[]> => {
    const { out } = await bufCurl("http://localhost/globalv1.Sets/Watch", "{}", ["--unix-socket", sock], { timeoutMs: 20_000 });
    return [...out.matchAll(/"Set":\s*"GlobalServiceInfos",\s*"Path":\s*"([^"]+)"/g)].map((m) => m[1]);
  };

  test("kpng serve --kube-api-content-type application/json: lists and watches in JSON, serves a Service created with kubectl", async () => {
    const sock = join(dir.path, "brain.sock");
    const serve = await startServe([
      "--kubeconfig",
      kubeconfig,
      "--kube-api-content-type",
      JSON_TYPE,
      "--kube-api-qps",
      "50",
      "--kube-api-burst",
      "100",
      "--listen",
      `unix://${sock}`,
    ]);
    procs.push(serve);
    // the API may be served before every list is done (a loaded machine): wait for each kind's line
    for (const kind of ["EndpointSlice", "Node", "Service"]) await serve.waitFor(new RegExp(` listed .*kind=${kind}\\b`));
    const listed = serve.stderr.filter((l) => / listed /.test(l));
    expect(listed.map((l) => /kind=(\w+)/.exec(l)?.[1]).sort()).toEqual(["EndpointSlice", "Node", "Service"]);
    for (const l of listed) expect(l).toContain("as=json");
    // the node mode's no-effect flags are named, as there
    expect(serve.stderr.some((l) => /WARN .*no effect in kpng: --kube-api-qps, --kube-api-burst/.test(l))).toBe(true);
    await api.apply(
      svc({ name: "late", clusterIPs: [v4.clusterIP(41)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }),
      slice({ service: "late", ports: [{ name: "http", port: 8080 }], endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }),
    );
    let paths: string[] = [];
    const end = performance.now() + LOADED_WAIT_MS;
    while (!paths.some((p) => p.startsWith("default|late|")) && performance.now() < end) {
      paths = await servedServices(sock);
      await Bun.sleep(200);
    }
    expect(paths.filter((p) => p.startsWith("default|late|"))).toHaveLength(1);
    expect(serve.stderr.filter((l) => /watch failed|not decoded/.test(l))).toEqual([]);
    // loaded waits: the start, the lists, the Service served
  }, 210_000);

  test("kpng local --kube-api-content-type application/json: reads JSON, prints the Service", async () => {
    await api.apply(svc({ name: "web", clusterIPs: [v4.clusterIP(42)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }));
    const p = startKpng(["local", "--kubeconfig", kubeconfig, "--kube-api-content-type", JSON_TYPE, "--node-name", NODE, "-v", "2"]);
    procs.push(p);
    const code = await p.proc.exited;
    await Bun.sleep(50); // let the pumps drain
    expect(code).toBe(0);
    const state = JSON.parse(p.stdout.join("\n")) as { services: Array<{ namespace: string; name: string; clusterIPs: string[] }> };
    expect(state.services.find((s) => s.name === "web")).toMatchObject({ namespace: "default", clusterIPs: [v4.clusterIP(42)] });
    const listed = p.stderr.filter((l) => / listed /.test(l));
    expect(listed.length).toBeGreaterThan(0);
    for (const l of listed) expect(l).toContain("as=json");
  }, 90_000);
});
