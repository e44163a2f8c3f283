// The manifests in deploy/ agree with the program: every flag they pass
// exists and validates, the configuration they ship loads without a warning,
// the RBAC grants what the source asks for, and the example sidecar's plugin
// is a Backend. (test/image runs the image with them.)

import { describe, expect, test } from "bun:test";
import { parseArgs } from "citty";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { parseKubeProxyConfig } from "../../src/core/config/config-file.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { apiClientArgs, checkUnknownFlags, configFromFlags, listenArgs, proxyArgs, sourceArgs } from "../../src/core/config/flags.ts";
import { TOKEN_AUDIENCE } from "../../src/core/api/server/token-review.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { parseClientAddress } from "../../src/core/api/server/address.ts";
import { checkListen } from "../../src/core/api/server/index.ts";
import { isIP } from "node:net";
import { resourceSpecs } from "../../src/core/sources/kube.ts";
import { loadBackend } from "../../src/host/loader.ts";
import { tempDir } from "../sources/kube/helpers.ts";

const root = join(import.meta.dir, "../..");
type Doc = Record<string, any>;
const docs: Doc[] = readdirSync(join(root, "deploy"))
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((f) => parseAllDocuments(readFileSync(join(root, "deploy", f), "utf8")).map((d) => d.toJS() as Doc));
const find = (kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name)!;
const expand = (args: string[]) => args.map((a) => a.replace("$(NODE_NAME)", "node-1"));

describe("deploy/daemonset.yaml", () => {
  const ds = find("DaemonSet", "kpng");
  const pod = ds.spec.template.spec;
  const c = pod.containers[0];

  test("host network, privileged, the node's name", () => {
    expect(pod.hostNetwork).toBe(true);
    expect(c.securityContext.privileged).toBe(true);
    expect(c.env.find((e: Doc) => e.name === "NODE_NAME").valueFrom.fieldRef.fieldPath).toBe("spec.nodeName");
  });

  test("the host's /run/xtables.lock and a host directory for the API socket", () => {
    const vol = (mount: string) => pod.volumes.find((v: Doc) => v.name === c.volumeMounts.find((m: Doc) => m.mountPath === mount).name);
    expect(vol("/run/xtables.lock").hostPath).toEqual({ path: "/run/xtables.lock", type: "FileOrCreate" });
    expect(vol("/run/kpng").hostPath.path).toBe("/run/kpng");
    expect(c.args).toContain("--listen=unix:///run/kpng/kpng.sock");
  });

  test("its flags exist and validate", () => {
    const args = expand(c.args);
    const defs = { ...sourceArgs, ...proxyArgs, ...listenArgs };
    expect(() => checkUnknownFlags(args, defs)).not.toThrow();
    expect(configFromFlags(parseArgs(args, defs) as never, args, defaultConfig()).nodeName).toBe("node-1");
  });

  test("the liveness probe asks /livez on the health port the configuration sets", () => {
    const cfg = parseKubeProxyConfig("config.conf", find("ConfigMap", "kpng").data["config.conf"]).doc;
    expect(c.livenessProbe.httpGet.path).toBe("/livez");
    expect(cfg.healthzBindAddress.endsWith(`:${c.livenessProbe.httpGet.port}`)).toBe(true);
  });

  test("the shipped configuration loads without a warning", () => {
    const { doc, warnings } = parseKubeProxyConfig("config.conf", find("ConfigMap", "kpng").data["config.conf"]);
    expect(warnings).toEqual([]);
    expect(doc.mode).toBe("nftables");
  });
});

describe("deploy/rbac.yaml", () => {
  const rules: Doc[] = find("ClusterRole", "kpng").rules;
  const allows = (group: string, resource: string, verb: string) =>
    rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb));
  const specs = resourceSpecs(defaultConfig({ nodeName: "n" }));
  const cases: Array<[string, string, string]> = [
    ["", "services", "list"],
    ["", "services", "watch"],
    ["discovery.k8s.io", "endpointslices", "list"],
    ["discovery.k8s.io", "endpointslices", "watch"],
    ["", "nodes", "list"],
    ["", "nodes", "watch"],
    ["", "events", "create"],
    ["events.k8s.io", "events", "create"],
  ];
  for (const [group, resource, verb] of cases)
    test(`${verb} ${resource}${group ? "." + group : ""}`, () => expect(allows(group, resource, verb)).toBe(true));

  test("covers every path the source lists and watches", () => {
    for (const s of Object.values(specs)) {
      const [, group, resource] = /^\/(?:api\/v1|apis\/([^/]+)\/[^/]+)\/(\w+)$/.exec(s.path)!;
      expect(allows(group ?? "", resource, "watch")).toBe(true);
    }
  });

  test("bound to the DaemonSet's service account", () => {
    const binding = find("ClusterRoleBinding", "kpng");
    expect(binding.subjects[0]).toMatchObject({
      kind: "ServiceAccount",
      name: find("DaemonSet", "kpng").spec.template.spec.serviceAccountName,
      namespace: "kube-system",
    });
  });
});

describe("deploy/sidecar-example.yaml", () => {
  const ds = find("DaemonSet", "kpng-example-backend");
  const c = ds.spec.template.spec.containers[0];

  test("follows the brain's socket from the same host directory", () => {
    expect(c.args[0]).toBe("backend");
    expect(c.args).toContain("--api=unix:///run/kpng/kpng.sock");
    expect(ds.spec.template.spec.volumes.find((v: Doc) => v.name === "kpng-socket").hostPath.path).toBe("/run/kpng");
    const known = new Set([...Object.keys(proxyArgs), "node-name", "api", "config", "protocol"]);
    for (const a of expand(c.args.slice(1))) expect(known.has(a.replace(/^--/, "").split("=")[0])).toBe(true);
  });

  test("its plugin is a kpng Backend", async () => {
    const tmp = tempDir();
    try {
      const file = join(tmp.dir, "logging-backend.ts");
      writeFileSync(file, find("ConfigMap", "kpng-example-backend").data["logging-backend.ts"]);
      const b = await loadBackend({ plugin: file }, { config: defaultConfig(), log: memoryLogger(), out: () => {} });
      expect([b.name, b.kind]).toEqual(["logging", "full"]);
    } finally {
      tmp.remove();
    }
  });
});

describe("deploy/global.yaml", () => {
  const brain = find("Deployment", "kpng-brain");
  const agent = find("DaemonSet", "kpng-agent");
  const bc = brain.spec.template.spec.containers[0];
  const ac = agent.spec.template.spec.containers[0];
  const defs = { ...sourceArgs, ...proxyArgs, ...listenArgs, ...apiClientArgs, "metrics-bind-address": proxyArgs["metrics-bind-address"] };
  const flag = (args: string[], name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  /** the volume mounted at the directory holding `path`, and the file name in it */
  const volumeOf = (pod: Doc, c: Doc, path: string) => {
    const mount = c.volumeMounts.find((m: Doc) => path.startsWith(`${m.mountPath}/`));
    return { volume: pod.volumes.find((v: Doc) => v.name === mount?.name), file: path.slice(mount.mountPath.length + 1) };
  };

  test("two brains on two nodes' host network, serving TLS on a port agents can reach", () => {
    expect(brain.spec.replicas).toBe(2);
    expect(brain.spec.template.spec.hostNetwork).toBe(true);
    expect(brain.spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey).toBe(
      "kubernetes.io/hostname",
    );
    expect(bc.args[0]).toBe("serve");
    expect(() => checkUnknownFlags(bc.args.slice(1), defs)).not.toThrow();
    expect(bc.args).not.toContain("--listen-any");
    expect(() => checkListen([flag(bc.args, "listen")!], false, true)).not.toThrow();
  });

  test("the brains' certificate, key and client CA come from one Secret, mounted whole (a renewal reaches the files)", () => {
    const pod = brain.spec.template.spec;
    for (const [name, key] of [
      ["listen-tls-crt", "tls.crt"],
      ["listen-tls-key", "tls.key"],
      ["listen-tls-ca", "ca.crt"],
    ]) {
      const { volume, file } = volumeOf(pod, bc, flag(bc.args, name)!);
      expect(volume.secret.secretName).toBe("kpng-brain-tls");
      expect(file).toBe(key);
    }
    expect(bc.volumeMounts.every((m: Doc) => m.subPath === undefined)).toBe(true);
  });

  test("brains check agents' tokens: kpng-agent's only, and may create TokenReviews", () => {
    expect(flag(bc.args, "listen-token-review")).toBe(`system:serviceaccount:kube-system:${agent.spec.template.spec.serviceAccountName}`);
    const binding = find("ClusterRoleBinding", "kpng-brain-auth-delegator");
    expect(binding.roleRef.name).toBe("system:auth-delegator");
    expect(binding.subjects[0]).toMatchObject({
      kind: "ServiceAccount",
      name: brain.spec.template.spec.serviceAccountName,
      namespace: "kube-system",
    });
  });

  test("brains reach the API server by address, not through the Service proxy", () => {
    const host = bc.env.find((e: Doc) => e.name === "KUBERNETES_SERVICE_HOST").value;
    expect(isIP(host)).toBe(4);
    expect(brain.spec.template.spec.serviceAccountName).toBe(find("ClusterRoleBinding", "kpng").subjects[0].name);
  });

  test("agents follow both brains by DNS name on the brains' port, resolved without cluster DNS", () => {
    const port = new URL(flag(bc.args, "listen")!.replace("tcp:", "http:")).port;
    const apis = ac.args.filter((a: string) => a.startsWith("--api=")).map((a: string) => parseClientAddress(a.slice("--api=".length)));
    expect(apis.length).toBe(2);
    for (const a of apis) {
      expect(a).toMatchObject({ kind: "tcp", port: Number(port) });
      expect(isIP((a as { host: string }).host)).toBe(0);
    }
    // cluster DNS is a ClusterIP the agents themselves program
    expect(agent.spec.template.spec.dnsPolicy).toBe("Default");
    expect(agent.spec.template.spec.hostNetwork).toBe(true);
    const args = expand(ac.args);
    expect(() => checkUnknownFlags(args, defs)).not.toThrow();
    expect(configFromFlags(parseArgs(args, defs) as never, args, defaultConfig()).nodeName).toBe("node-1");
  });

  test("agents check the brains' CA and send a projected token for the audience kpng; no API-server token", () => {
    const pod = agent.spec.template.spec;
    expect(pod.automountServiceAccountToken).toBe(false);
    const ca = volumeOf(pod, ac, flag(ac.args, "tls-ca")!);
    expect(ca.volume.secret).toEqual({ secretName: "kpng-brain-tls", items: [{ key: "ca.crt", path: ca.file }] });
    const token = volumeOf(pod, ac, flag(ac.args, "token-file")!);
    const source = token.volume.projected.sources[0].serviceAccountToken;
    expect(source).toMatchObject({ path: token.file, audience: TOKEN_AUDIENCE });
    // the agents' account has no rights in the API
    const sa = find("ServiceAccount", pod.serviceAccountName);
    expect(sa.automountServiceAccountToken).toBe(false);
    expect(docs.some((d) => /RoleBinding$/.test(d.kind) && d.subjects?.some((s: Doc) => s.name === pod.serviceAccountName))).toBe(false);
  });

  test("cert-manager's certificate names what the agents dial, into the Secret brains mount", () => {
    const cert = find("Certificate", "kpng-brain-tls");
    const hosts = ac.args
      .filter((a: string) => a.startsWith("--api="))
      .map((a: string) => (parseClientAddress(a.slice("--api=".length)) as { host: string }).host);
    expect(cert.spec.dnsNames).toEqual(hosts);
    expect(cert.spec.secretName).toBe(brain.spec.template.spec.volumes[0].secret.secretName);
  });

  test("the agent's configuration loads without a warning", () => {
    const { warnings } = parseKubeProxyConfig("config.yaml", find("ConfigMap", "kpng-agent").data["config.yaml"]);
    expect(warnings).toEqual([]);
    expect(ac.volumeMounts.find((m: Doc) => m.mountPath === "/etc/kpng")).toBeDefined();
  });
});

describe("deploy/daemonset.yaml runs as kubeadm runs kube-proxy", () => {
  const pod = find("DaemonSet", "kpng").spec.template.spec;
  const c = pod.containers[0];
  const configMap = find("ConfigMap", "kpng");
  const mount = c.volumeMounts.find((m: Doc) => m.mountPath === "/var/lib/kube-proxy");
  const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;

  test("kpng's own ConfigMap (never kube-proxy's) mounted where kube-proxy's is, --config its config.conf", () => {
    expect(pod.volumes.find((v: Doc) => v.name === mount.name).configMap.name).toBe("kpng");
    expect(c.args).toContain("--config=/var/lib/kube-proxy/config.conf");
    expect(c.args).toContain("--hostname-override=$(NODE_NAME)");
  });

  test("its kubeconfig reaches the API server by address, with the pod's service-account credentials", () => {
    const cfg = parseKubeProxyConfig("config.conf", configMap.data["config.conf"]).doc;
    expect(cfg.clientConnection.kubeconfig).toBe("/var/lib/kube-proxy/kubeconfig.conf");
    const kubeconfig = parseAllDocuments(configMap.data["kubeconfig.conf"])[0].toJS() as Doc;
    const server = new URL(kubeconfig.clusters[0].cluster.server);
    // not the kubernetes Service (its ClusterIP or DNS name): kpng is what makes that reachable
    expect(isIP(server.hostname)).toBe(4);
    expect(kubeconfig.clusters[0].cluster["certificate-authority"]).toBe("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
    expect(kubeconfig.users[0].user.tokenFile).toBe("/var/run/secrets/kubernetes.io/serviceaccount/token");
  });

  test("names resolve with the node's resolver, not cluster DNS (which needs a Service proxy)", () => {
    expect(pod.dnsPolicy ?? "ClusterFirst").toBe("ClusterFirst");
  });

  test("the image tag is package.json's version", () => {
    expect(c.image).toBe(`kpng:${version}`);
    expect(find("DaemonSet", "kpng-example-backend").spec.template.spec.containers[0].image).toBe(`kpng:${version}`);
    // the rollback patch's init container runs kpng --cleanup from the same image
    const rollback = parseAllDocuments(readFileSync(join(root, "deploy/kube-proxy-rollback.yaml"), "utf8"))[0].toJS() as Doc;
    expect(rollback.spec.template.spec.initContainers[0].image).toBe(`kpng:${version}`);
  });

  test("memory requested and limited, CPU requested and never limited (a throttled proxy syncs late)", () => {
    const r = c.resources;
    const bytes = (q: string) => Number(/^(\d+)Mi$/.exec(q)![1]) * 2 ** 20;
    expect(bytes(r.limits.memory)).toBeGreaterThan(bytes(r.requests.memory));
    expect(r.requests.cpu).toBeDefined();
    expect(r.limits.cpu).toBeUndefined();
  });
});
