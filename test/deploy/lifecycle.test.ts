// deploy/README.md's kubeadm lifecycle, run as an operator runs it: each
// procedure's shell block (marked `<!-- test: NAME -->`) as written, with the
// real kubectl against the real kube-apiserver 1.36.2, on the objects kubeadm
// 1.36 creates for kube-proxy (test/fixtures/kubeadm/kube-proxy.yaml, from
// kubeadm's source). After each step, the objects it leaves; after the
// migration, kpng started with its ConfigMap's files at the paths the pod
// sees them (a mount namespace of its own), serving a Service to a client.
// kubeadm itself is not in the test kit: what `kubeadm upgrade` checks is
// asserted as the API server answers it.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { haveK8s, type KubeApiServer, requireK8s, sharedApiServer } from "../harness/kube-apiserver.ts";
import { type KpngProcess, LOADED_WAIT_MS, ROOT, startKpng, tempDir } from "../harness/kpng-process.ts";
import { createTopology, type Topology } from "../harness/netns.ts";

type Doc = Record<string, any>;
const FIXTURE = join(import.meta.dir, "../fixtures/kubeadm/kube-proxy.yaml");
const kubeadm: Doc[] = parseAllDocuments(readFileSync(FIXTURE, "utf8")).map((d) => d.toJS() as Doc);
const kubeadmConfigMap = kubeadm.find((d) => d.kind === "ConfigMap")!;
const kubeadmDaemonSet = kubeadm.find((d) => d.kind === "DaemonSet")!;
const deployDoc = (file: string, kind: string): Doc =>
  parseAllDocuments(readFileSync(join(ROOT, "deploy", file), "utf8"))
    .map((d) => d.toJS() as Doc)
    .find((d) => d.kind === kind)!;
const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;

/** The ```sh block that follows `<!-- test: NAME -->` in deploy/README.md. */
function readmeBlock(name: string): string {
  const readme = readFileSync(join(ROOT, "deploy/README.md"), "utf8");
  const m = new RegExp(`<!-- test: ${name} -->\\n\`\`\`sh\\n([\\s\\S]*?)\`\`\``).exec(readme);
  if (!m) throw new Error(`deploy/README.md: no sh block marked <!-- test: ${name} -->`);
  return m[1];
}

describe("test/fixtures/kubeadm/kube-proxy.yaml: kubeadm 1.36's kube-proxy objects", () => {
  test("the ConfigMap carries kubeadm's checksum of its values (componentconfigs.ChecksumForConfigMap: sha256 in key order)", () => {
    const h = createHash("sha256");
    for (const key of Object.keys(kubeadmConfigMap.data).sort()) h.update(kubeadmConfigMap.data[key]);
    expect(kubeadmConfigMap.metadata.annotations["kubeadm.kubernetes.io/component-config.hash"]).toBe(`sha256:${h.digest("hex")}`);
  });

  test("its config.conf is kubeadm's marshalled KubeProxyConfiguration (the golden file kpng's config tests read)", () => {
    const golden = readFileSync(join(ROOT, "test/config/golden/kubeadm.v1alpha1.yaml"), "utf8");
    const fields = golden
      .split("\n")
      .filter((l) => !l.startsWith("#"))
      .join("\n")
      .trimEnd();
    expect(kubeadmConfigMap.data["config.conf"]).toBe(fields);
  });

  test("kubeadm's DaemonSet reads it as kubeadm's template says: /var/lib/kube-proxy/config.conf", () => {
    const pod = kubeadmDaemonSet.spec.template.spec;
    expect(pod.containers[0].command).toContain("--config=/var/lib/kube-proxy/config.conf");
    expect(pod.volumes.find((v: Doc) => v.name === "kube-proxy").configMap.name).toBe("kube-proxy");
  });
});

const real = haveK8s("deploy/README.md's kubeadm lifecycle against the real API server");

describe.skipIf(!real)("deploy/README.md's kubeadm lifecycle, against the real kube-apiserver", () => {
  let api: KubeApiServer;
  const scratch = tempDir("kpng-lifecycle-");
  let kubeconfig: string;

  /** Runs a README block with sh -eu in the scratch directory, kubectl on PATH as the cluster's admin. */
  const runBlock = async (name: string): Promise<string> => {
    const p = Bun.spawn(["sh", "-eu", "-c", readmeBlock(name)], {
      cwd: scratch.path,
      env: { ...process.env, KUBECONFIG: kubeconfig, PATH: `${requireK8s().dir}:${process.env.PATH}` },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`deploy/README.md block ${name}: exit ${code}\n${out}\n${err}`);
    return out;
  };
  /** kube-system's DaemonSets and ConfigMaps by name, with the objects */
  const kubeSystem = async (
    kind: "daemonsets" | "configmaps" | "serviceaccounts" | "roles" | "rolebindings",
  ): Promise<Map<string, Doc>> => {
    const list = JSON.parse(await api.kubectl(["-n", "kube-system", "get", kind, "-o", "json"])) as { items: Doc[] };
    return new Map(list.items.map((o) => [o.metadata.name as string, o]));
  };
  const clusterWide = async (kind: "clusterrolebindings" | "clusterroles"): Promise<Set<string>> =>
    new Set((JSON.parse(await api.kubectl(["get", kind, "-o", "json"])) as { items: Doc[] }).items.map((o) => o.metadata.name));

  /** Nothing of kube-proxy's or kpng's in the cluster: what `kubeadm init --skip-phases=addon/kube-proxy` leaves. */
  const emptyCluster = async () => {
    await api.kubectl(["-n", "kube-system", "delete", "daemonset,configmap", "kube-proxy", "kpng", "--ignore-not-found"]);
    await api.kubectl(["delete", "-f", FIXTURE, "-f", join(ROOT, "deploy/rbac.yaml"), "--ignore-not-found"]);
  };

  beforeAll(async () => {
    api = await sharedApiServer();
    scratch.create();
    // the blocks name deploy/ files as from the repository's root; they write their own files beside it
    symlinkSync(join(ROOT, "deploy"), join(scratch.path, "deploy"));
    kubeconfig = api.writeKubeconfig(join(scratch.path, "admin.kubeconfig"), { user: "admin" });
  }, 60_000);
  afterAll(() => scratch.remove());

  describe("a new cluster (kubeadm init --skip-phases=addon/kube-proxy)", () => {
    beforeAll(() => emptyCluster(), 60_000);

    test("kpng's manifests pass the API server's own validation (server-side dry run), and the dry run creates nothing", async () => {
      const out = await api.kubectl([
        "apply",
        "--dry-run=server",
        ...["kpng-configmap.yaml", "rbac.yaml", "daemonset.yaml"].flatMap((f) => ["-f", join(ROOT, "deploy", f)]),
      ]);
      expect(out).toContain("configmap/kpng created (server dry run)");
      expect(out).toContain("daemonset.apps/kpng created (server dry run)");
      expect(out).toContain("clusterrolebinding.rbac.authorization.k8s.io/kpng created (server dry run)");
      expect((await kubeSystem("configmaps")).has("kpng")).toBe(false);
    });

    test("the README's block leaves kpng's ConfigMap (the control plane's address, the pod CIDR), RBAC and DaemonSet; nothing of kube-proxy's", async () => {
      await runBlock("new-cluster");
      const cms = await kubeSystem("configmaps");
      const dss = await kubeSystem("daemonsets");
      const cm = cms.get("kpng")!;
      expect(cm.data["kubeconfig.conf"]).toContain("server: https://192.0.2.10:6443");
      expect(cm.data["config.conf"]).toContain('clusterCIDR: "10.244.0.0/16"');
      expect(dss.get("kpng")!.spec.template.spec.volumes.find((v: Doc) => v.configMap)?.configMap.name).toBe("kpng");
      expect((await kubeSystem("serviceaccounts")).has("kpng")).toBe(true);
      expect((await clusterWide("clusterrolebindings")).has("kpng")).toBe(true);
      expect([cms.has("kube-proxy"), dss.has("kube-proxy")]).toEqual([false, false]);
    });
  });

  describe("migrating a running kubeadm cluster", () => {
    beforeAll(async () => {
      await emptyCluster();
      // what `kubeadm init` left: kube-proxy's ServiceAccount, RBAC, ConfigMap and DaemonSet
      await api.kubectl(["apply", "-f", FIXTURE]);
    }, 60_000);

    test("the README's block runs; kpng's ConfigMap holds kube-proxy's two files, byte for byte", async () => {
      await runBlock("migrate");
      const kpng = (await kubeSystem("configmaps")).get("kpng")!;
      expect(kpng.data).toEqual(kubeadmConfigMap.data);
      // the migration saved kube-proxy's DaemonSet for a rollback
      const saved = parseAllDocuments(readFileSync(join(scratch.path, "kube-proxy-daemonset.yaml"), "utf8"))[0].toJS() as Doc;
      expect(saved.spec.template.spec.containers[0]).toMatchObject({
        command: kubeadmDaemonSet.spec.template.spec.containers[0].command,
        image: kubeadmDaemonSet.spec.template.spec.containers[0].image,
      });
    });

    test("it leaves kpng's DaemonSet, ConfigMap and ServiceAccount; no kube-proxy DaemonSet or ConfigMap; kube-proxy's RBAC kept for a rollback", async () => {
      const dss = await kubeSystem("daemonsets");
      const cms = await kubeSystem("configmaps");
      expect([dss.has("kpng"), cms.has("kpng"), (await kubeSystem("serviceaccounts")).has("kpng")]).toEqual([true, true, true]);
      expect([dss.has("kube-proxy"), cms.has("kube-proxy")]).toEqual([false, false]);
      expect((await kubeSystem("serviceaccounts")).has("kube-proxy")).toBe(true);
      expect((await clusterWide("clusterrolebindings")).has("kubeadm:node-proxier")).toBe(true);
    });

    test("what kubeadm upgrade apply checks before re-installing kube-proxy: GET kube-system/configmaps/kube-proxy is NotFound", async () => {
      // runKubeProxyAddon (cmd/kubeadm/app/cmd/phases/upgrade/apply/addons.go) skips the addon on apierrors.IsNotFound
      const res = await api.get("/api/v1/namespaces/kube-system/configmaps/kube-proxy");
      expect(res.status).toBe(404);
      expect(((await res.json()) as { reason: string }).reason).toBe("NotFound");
    });

    describe("kpng started with kpng's ConfigMap as the DaemonSet's pod sees it", () => {
      let topo: Topology;
      let kpng: KpngProcess;
      const stops: Array<() => unknown> = [];
      const ip = v4.clusterIP(61);

      beforeAll(async () => {
        topo = await createTopology({ pods: 1, prefix: "kplc" });
        stops.push(() => topo.destroy());
        await topo.serve(topo.pods[0], { tcp: [8080] });
        stops.push(await api.reach(topo.node.ns, 6443));
        const nodeName = "node-a";
        await api.apply(
          node(nodeName, { ips: [topo.node.v4] }),
          svc({ name: "web", clusterIPs: [ip] }),
          slice({ service: "web", endpoints: [{ ip: topo.pods[0].v4, node: nodeName, pod: "pod0" }] }),
        );
        // the pod's volumes: kpng's ConfigMap as the API server holds it, the service account's token and CA
        const files = (dir: string, content: Record<string, string>) => {
          mkdirSync(join(scratch.path, dir));
          for (const [f, text] of Object.entries(content)) writeFileSync(join(scratch.path, dir, f), text);
          return join(scratch.path, dir);
        };
        const cm = (await kubeSystem("configmaps")).get("kpng")!;
        const configMap = files("pod-config", cm.data);
        const token = (await api.kubectl(["create", "token", "kpng", "-n", "kube-system"])).trim();
        const sa = files("pod-serviceaccount", { token, "ca.crt": api.ca, namespace: "kube-system" });
        // a mount namespace of kpng's own: /var/lib and /run are fresh tmpfs there, holding the
        // ConfigMap at /var/lib/kube-proxy and the token at /var/run/secrets/kubernetes.io/serviceaccount
        const pod = [
          "set -e",
          "mount -t tmpfs tmpfs /var/lib",
          "mkdir /var/lib/kube-proxy",
          `cp ${configMap}/* /var/lib/kube-proxy/`,
          "mount -t tmpfs tmpfs /run",
          "mkdir -p /run/secrets/kubernetes.io/serviceaccount /run/kpng",
          `cp ${sa}/* /run/secrets/kubernetes.io/serviceaccount/`,
          'exec "$@"',
        ].join("\n");
        const c = deployDoc("daemonset.yaml", "DaemonSet").spec.template.spec.containers[0];
        kpng = startKpng(
          (c.args as string[]).map((a) => a.replace("$(NODE_NAME)", nodeName)),
          { wrap: ["ip", "netns", "exec", topo.node.ns, "unshare", "--mount", "--propagation", "private", "sh", "-c", pod, "sh"] },
        );
        stops.push(() => kpng.stop());
        await kpng.waitFor(/ INFO kpng: synced /);
      }, 150_000);
      afterAll(async () => {
        for (const s of stops.reverse()) await s();
      });

      test('kubeadm\'s mode: "" is iptables, as kube-proxy 1.36 runs it', async () => {
        await kpng.waitFor(/proxy mode mode=iptables from=default/);
      });

      test("a client reaches a Service's ClusterIP through the rules kpng programmed from the API server", async () => {
        let r = await topo.probe(topo.client.ns, { ip, port: 80, proto: "tcp", timeout: 1 });
        for (const end = Date.now() + LOADED_WAIT_MS; !r.ok && Date.now() < end; await Bun.sleep(200))
          r = await topo.probe(topo.client.ns, { ip, port: 80, proto: "tcp", timeout: 1 });
        expect(r).toMatchObject({ ok: true, who: "pod0" });
      }, 90_000);
    });
  });

  describe("rollback to kube-proxy", () => {
    test("the saved DaemonSet, patched with deploy/kube-proxy-rollback.yaml, passes server-side dry run", async () => {
      const patched = await api.kubectl([
        "patch",
        "--local",
        "-f",
        join(scratch.path, "kube-proxy-daemonset.yaml"),
        "--type=strategic",
        `--patch-file=${join(ROOT, "deploy/kube-proxy-rollback.yaml")}`,
        "-o",
        "yaml",
      ]);
      expect(await api.kubectl(["apply", "--dry-run=server", "-f", "-"], patched)).toContain(
        "daemonset.apps/kube-proxy created (server dry run)",
      );
    });

    test("the README's block leaves kube-proxy's DaemonSet (kpng --cleanup first) and ConfigMap back; nothing of kpng's", async () => {
      await runBlock("rollback");
      const dss = await kubeSystem("daemonsets");
      const cms = await kubeSystem("configmaps");
      expect([dss.has("kpng"), cms.has("kpng"), (await kubeSystem("serviceaccounts")).has("kpng")]).toEqual([false, false, false]);
      expect((await clusterWide("clusterrolebindings")).has("kpng")).toBe(false);
      expect(cms.get("kube-proxy")!.data).toEqual(kubeadmConfigMap.data);
      const pod = dss.get("kube-proxy")!.spec.template.spec;
      expect(pod.initContainers).toEqual([
        expect.objectContaining({
          name: "kpng-cleanup",
          image: `kpng:${VERSION}`,
          args: ["--cleanup"],
          securityContext: { privileged: true },
        }),
      ]);
      // kube-proxy itself as kubeadm made it, reading the ConfigMap that is back
      expect(pod.containers[0].command).toEqual(kubeadmDaemonSet.spec.template.spec.containers[0].command);
      expect(pod.containers[0].image).toBe(kubeadmDaemonSet.spec.template.spec.containers[0].image);
      expect(pod.volumes.find((v: Doc) => v.name === "kube-proxy").configMap.name).toBe("kube-proxy");
      // the init container's mounts are the DaemonSet's own volumes
      const volumes = new Set(pod.volumes.map((v: Doc) => v.name));
      for (const m of pod.initContainers[0].volumeMounts) expect(volumes.has(m.name)).toBe(true);
    });
  });
});
