// The manifests in deploy/ and the Dockerfile agree with the program: every
// flag they pass exists and validates, the configuration they ship loads
// without a warning, the RBAC grants what the source asks for, and the
// example sidecar's plugin is a Backend.

import { describe, expect, test } from "bun:test";
import { parseArgs } from "citty";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { parseKubeProxyConfig } from "../../src/core/config/config-file.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { checkUnknownFlags, configFromFlags, listenArgs, proxyArgs, sourceArgs } from "../../src/core/config/flags.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { resourceSpecs } from "../../src/core/sources/kube.ts";
import { loadBackend } from "../../src/plugins/loader.ts";
import { tempDir } from "./helpers.ts";

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
    const cfg = parseKubeProxyConfig("config.yaml", find("ConfigMap", "kpng").data["config.yaml"]).doc;
    expect(c.livenessProbe.httpGet.path).toBe("/livez");
    expect(cfg.healthzBindAddress.endsWith(`:${c.livenessProbe.httpGet.port}`)).toBe(true);
  });

  test("the shipped configuration loads without a warning", () => {
    const { doc, warnings } = parseKubeProxyConfig("config.yaml", find("ConfigMap", "kpng").data["config.yaml"]);
    expect(warnings).toEqual([]);
    expect(doc.mode).toBe("nftables");
  });
});

describe("deploy/rbac.yaml", () => {
  const rules: Doc[] = find("ClusterRole", "kpng").rules;
  const allows = (group: string, resource: string, verb: string) => rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb));
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
  for (const [group, resource, verb] of cases) test(`${verb} ${resource}${group ? "." + group : ""}`, () => expect(allows(group, resource, verb)).toBe(true));

  test("covers every path the source lists and watches", () => {
    for (const s of Object.values(specs)) {
      const [, group, resource] = /^\/(?:api\/v1|apis\/([^/]+)\/[^/]+)\/(\w+)$/.exec(s.path)!;
      expect(allows(group ?? "", resource, "watch")).toBe(true);
    }
  });

  test("bound to the DaemonSet's service account", () => {
    const binding = find("ClusterRoleBinding", "kpng");
    expect(binding.subjects[0]).toMatchObject({ kind: "ServiceAccount", name: find("DaemonSet", "kpng").spec.template.spec.serviceAccountName, namespace: "kube-system" });
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

describe("Dockerfile", () => {
  test("packages the compiled dist/kpng as the entry point", () => {
    const text = readFileSync(join(root, "Dockerfile"), "utf8");
    expect(text).toMatch(/^COPY dist\/kpng \/usr\/local\/bin\/kpng$/m);
    expect(text).toMatch(/^ENTRYPOINT \["\/usr\/local\/bin\/kpng"\]$/m);
    expect(readFileSync(join(root, "package.json"), "utf8")).toContain("--outfile dist/kpng");
  });
});
