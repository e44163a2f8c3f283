// deploy/windows/daemonset.yaml, the HostProcess DaemonSet for Windows nodes:
// the real kube-apiserver 1.36.2 accepts it (server-side dry run, which runs
// the API server's own validation of HostProcess pods), its kpng flags exist
// and validate, and it selects only Windows nodes.

import { describe, expect, test } from "bun:test";
import { parseArgs } from "citty";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { defaultConfig } from "../../src/core/config/config.ts";
import { checkUnknownFlags, configFromFlags, listenArgs, proxyArgs, sourceArgs } from "../../src/core/config/flags.ts";
import { haveK8s, sharedApiServer } from "../harness/kube-apiserver.ts";

const root = join(import.meta.dir, "../..");
const file = join(root, "deploy/windows/daemonset.yaml");
const ds: any = parse(readFileSync(file, "utf8"));
const pod = ds.spec.template.spec;
const c = pod.containers[0];

describe("deploy/windows/daemonset.yaml", () => {
  test("a HostProcess pod on the host network, as SYSTEM, on Windows nodes only", () => {
    expect(pod.securityContext.windowsOptions).toEqual({ hostProcess: true, runAsUserName: "NT AUTHORITY\\SYSTEM" });
    expect(pod.hostNetwork).toBe(true);
    expect(pod.nodeSelector).toEqual({ "kubernetes.io/os": "windows" });
  });

  test("it reads kpng's own ConfigMap, never kube-proxy's (which must go for kubeadm upgrade to leave kube-proxy out)", () => {
    const mount = c.volumeMounts.find((m: any) => m.mountPath === "/var/lib/kube-proxy");
    expect(pod.volumes.find((v: any) => v.name === mount.name).configMap.name).toBe("kpng");
    expect(c.args).toContain("--config=var/lib/kube-proxy/config.conf");
  });

  test("its kpng flags exist and validate, with the winkernel backend", () => {
    const args = (c.args as string[]).map((a) => a.replace("$(NODE_NAME)", "node-1"));
    const defs = { ...sourceArgs, ...proxyArgs, ...listenArgs };
    expect(() => checkUnknownFlags(args, defs)).not.toThrow();
    const cfg = configFromFlags(parseArgs(args, defs) as never, args, defaultConfig());
    expect(cfg.nodeName).toBe("node-1");
    expect(args).toContain("--backend=winkernel");
  });
});

describe.skipIf(!haveK8s("deploy/windows against the real API server"))("deploy/windows/daemonset.yaml, server-side dry run", () => {
  test("the real kube-apiserver accepts it with deploy/rbac.yaml", async () => {
    const api = await sharedApiServer();
    const out = await api.kubectl(["apply", "--dry-run=server", "-f", file, "-f", join(root, "deploy/rbac.yaml")]);
    expect(out).toContain("daemonset.apps/kpng-windows created (server dry run)");
  });

  test("the dry run validates: the same pod without the host network is refused", async () => {
    const api = await sharedApiServer();
    const broken = structuredClone(ds);
    broken.spec.template.spec.hostNetwork = false;
    const err = await api.kubectl(["apply", "--dry-run=server", "-f", "-"], stringify(broken)).then(
      () => "accepted",
      (e: Error) => e.message,
    );
    expect(err).toMatch(/hostNetwork/);
  });
});
