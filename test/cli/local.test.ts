// `kpng local`: the CLI contract's JSON shape on the shipped example, and
// exit codes for bad input.

import { describe, expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "../..");
const kpng = (...args: string[]) => Bun.spawnSync([process.execPath, join(root, "src/main.ts"), ...args], { cwd: root });

describe("kpng local", () => {
  test("prints the contract's shape for the example cluster, sorted", () => {
    const r = kpng("local", "--input", "examples/cluster.yaml", "--node-name", "node-1", "-o", "json");
    expect(r.exitCode).toBe(0);
    const doc = JSON.parse(r.stdout.toString());
    expect(doc.nodeName).toBe("node-1");
    const names = doc.services.map((s: { namespace: string; name: string }) => `${s.namespace}/${s.name}`);
    expect(names).toEqual([...names].sort());
    // skipped: ExternalName, headless, another proxy's
    expect(names).not.toContain("default/docs");
    expect(names).not.toContain("default/stateful");
    expect(names).not.toContain("default/mesh-only");
    const front = doc.services.find((s: { name: string }) => s.name === "front");
    expect(Object.keys(front)).toEqual(
      expect.arrayContaining([
        "namespace",
        "name",
        "type",
        "clusterIPs",
        "externalIPs",
        "loadBalancerIPs",
        "ports",
        "internalTrafficPolicy",
        "externalTrafficPolicy",
        "sessionAffinityTimeoutSeconds",
        "healthCheckNodePort",
        "endpoints",
      ]),
    );
    expect(front).toMatchObject({
      type: "LoadBalancer",
      loadBalancerIPs: ["198.18.64.1"],
      externalTrafficPolicy: "Local",
      sessionAffinityTimeoutSeconds: 600,
      healthCheckNodePort: 32100,
    });
    expect(front.ports).toEqual([{ name: "https", protocol: "TCP", port: 443, nodePort: 31443, targetPort: 8443 }]);
    expect(front.endpoints).toEqual([
      {
        ips: ["198.19.1.30"],
        local: true,
        internal: true,
        external: true,
        terminating: false,
        nodeName: "node-1",
        zone: "zone-a",
        ports: { https: 8443 },
      },
      {
        ips: ["198.19.3.30"],
        local: false,
        internal: true,
        external: false,
        terminating: false,
        nodeName: "node-3",
        zone: "zone-b",
        ports: { https: 8443 },
      },
    ]);
  });

  test("-o yaml prints the same document as YAML", () => {
    const r = kpng("local", "--input", "examples/cluster.yaml", "--node-name", "node-2", "-o", "yaml");
    expect(r.exitCode).toBe(0);
    expect(r.stdout.toString()).toStartWith("nodeName: node-2\n");
  });

  const bad: Array<{ name: string; args: string[]; stderr: RegExp }> = [
    { name: "missing input file", args: ["--input", "nope.yaml"], stderr: /nope\.yaml: cannot read input file: ENOENT/ },
    { name: "unknown flag", args: ["--input", "examples/cluster.yaml", "--frobnicate"], stderr: /flag --frobnicate: unknown flag/ },
    {
      name: "bad output format",
      args: ["--input", "examples/cluster.yaml", "-o", "xml"],
      stderr: /flag --output: "xml" must be json or yaml/,
    },
  ];
  for (const c of bad) {
    test(`bad input (${c.name}): one line on stderr, exit code 2`, () => {
      const r = kpng("local", "--node-name", "node-1", ...c.args);
      expect(r.exitCode).toBe(2);
      const err = r.stderr.toString().trim();
      expect(err.split("\n")).toHaveLength(1);
      expect(err).toMatch(c.stderr);
    });
  }
});
