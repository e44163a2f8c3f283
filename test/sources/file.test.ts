// The file source: formats kubectl prints, bad objects skipped with a line
// naming file/object/field, unreadable files an error, edits as revisions.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { Brain } from "../../src/core/brain/brain.ts";
import { isInvalidArgument } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { parseClusterFile, startFileSource } from "../../src/core/sources/file.ts";

const dir = mkdtempSync(join(tmpdir(), "kpng-file-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const service = (name: string, port = 80) => ({
  apiVersion: "v1",
  kind: "Service",
  metadata: { name, namespace: "default" },
  spec: { clusterIP: "198.18.0.10", ports: [{ name: "http", port }] },
});
const slice = (svc: string, ip: string) => ({
  apiVersion: "discovery.k8s.io/v1",
  kind: "EndpointSlice",
  metadata: { name: `${svc}-x`, namespace: "default", labels: { "kubernetes.io/service-name": svc } },
  addressType: "IPv4",
  ports: [{ name: "http", port: 8080 }],
  endpoints: [{ addresses: [ip], nodeName: "node-1" }],
});

describe("parsing", () => {
  test("a kubectl List, YAML multi-document and JSON all read the same objects; other kinds are ignored", () => {
    const items = [service("web"), slice("web", "198.19.1.1"), { apiVersion: "v1", kind: "Pod", metadata: { name: "p" } }];
    const asList = parseClusterFile("f", stringify({ apiVersion: "v1", kind: "List", items }));
    const asDocs = parseClusterFile("f", items.map((i) => stringify(i)).join("---\n"));
    const asJSON = parseClusterFile("f", JSON.stringify({ kind: "List", items }));
    for (const p of [asList, asDocs, asJSON]) {
      expect(p.objects.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual(["Service/web", "EndpointSlice/web-x"]);
      expect([p.errors, p.rejected, p.warnings]).toEqual([[], [], []]);
    }
  });

  // Objects no API server would hold: skipped (at start-up: exit 2, see file-bad.test.ts).
  const bad: Array<{ name: string; item: object; error: string }> = [
    {
      name: "port out of range",
      item: service("web", 70000),
      error: "f: item 0: service default/web spec.ports[0].port: 70000 is out of range",
    },
    {
      name: "bad cluster IP",
      item: { ...service("web"), spec: { clusterIP: "198.18.0.300", ports: [{ port: 80 }] } },
      error: 'f: item 0: service default/web spec.clusterIP: "198.18.0.300" is not an IP address: the service has no cluster IP to serve',
    },
    {
      name: "cluster IP not a string",
      item: { ...service("web"), spec: { clusterIP: 5, ports: [{ port: 80 }] } },
      error: "f: item 0: service default/web spec.clusterIP: 5 must be a string",
    },
    {
      name: "missing name",
      item: { kind: "Service", metadata: {}, spec: {} },
      error: "f: item 0: service <unnamed> metadata.name: missing",
    },
  ];
  for (const c of bad) {
    test(`one bad object (${c.name}) is skipped with a line naming file, object and field; the rest is kept`, () => {
      const p = parseClusterFile("f", stringify({ kind: "List", items: [c.item, service("ok")] }));
      expect(p.objects.map((o) => o.metadata.name)).toEqual(["ok"]);
      expect(p.errors).toEqual([c.error]);
      expect(p.dropped).toHaveLength(1);
    });
  }

  // One value of an object kube-proxy skips, or does not know: the value goes, the object stays.
  const values: Array<{ name: string; item: object; line: string; rejected: boolean }> = [
    {
      name: "bad entry of clusterIPs",
      item: {
        ...service("web"),
        spec: { clusterIP: "198.18.0.10", clusterIPs: ["198.18.0.10", "x"], ipFamilies: ["IPv4", "IPv6"], ports: [{ port: 80 }] },
      },
      line: 'f: service default/web spec.clusterIPs[1]: "x" is not an IP address: skipped',
      rejected: true,
    },
    {
      name: "endpoint address of the wrong family",
      item: slice("web", "2001:db8::1"),
      line: 'f: endpointSlice default/web-x endpoints[0].addresses[0]: "2001:db8::1" is not an IPv4 address: endpoint skipped',
      rejected: true,
    },
    {
      name: "unknown protocol (a newer API server's)",
      item: { ...service("web"), spec: { clusterIP: "198.18.0.1", ports: [{ port: 80, protocol: "ICMP" }] } },
      line: 'f: service default/web spec.ports[0].protocol: unknown protocol "ICMP": port 80 skipped',
      rejected: false,
    },
  ];
  for (const c of values) {
    test(`one bad value (${c.name}): the object is kept, the value named once`, () => {
      const items = "addressType" in c.item ? [service("web"), c.item, service("ok")] : [c.item, service("ok")];
      const p = parseClusterFile("f", stringify({ kind: "List", items }));
      expect(p.objects.map((o) => o.metadata.name)).toEqual(items.map((i) => (i as { metadata: { name: string } }).metadata.name));
      expect(p.errors).toEqual([]);
      expect(c.rejected ? p.rejected : p.warnings).toEqual([c.line]);
    });
  }

  test("a slice whose service is not in the file: ignored with a warning (an API server holds such slices)", () => {
    const p = parseClusterFile("f", stringify({ kind: "List", items: [slice("gone", "198.19.1.1"), service("ok")] }));
    expect(p.objects.map((o) => o.metadata.name)).toEqual(["ok"]);
    expect(p.warnings).toEqual([
      "f: item 0: endpointSlice default/gone-x metadata.labels[kubernetes.io/service-name]: service default/gone is not in the file",
    ]);
  });

  test("a file that is not YAML or JSON is an invalid_argument error naming the file and line", () => {
    let err: unknown;
    try {
      parseClusterFile("cluster.yaml", "kind: Service\n  metadata: [oops\n");
    } catch (e) {
      err = e;
    }
    expect(isInvalidArgument(err)).toBe(true);
    expect(String((err as Error).message)).toMatch(/^\[invalid_argument\] cluster\.yaml:\d+: not valid YAML or JSON/);
  });
});

describe("watching", () => {
  test("an edit is one new revision; a broken edit keeps the last good state", async () => {
    const path = join(dir, "cluster.yaml");
    const write = (items: object[]) => writeFileSync(path, stringify({ kind: "List", items }));
    write([service("web"), slice("web", "198.19.1.1"), { kind: "Node", metadata: { name: "node-1" } }]);
    const brain = new Brain();
    const log = memoryLogger();
    const src = await startFileSource({ path, brain, log });
    try {
      const view = brain.view("node-1");
      expect(view.state!.rev).toBe(1);
      write([service("web"), slice("web", "198.19.1.2"), { kind: "Node", metadata: { name: "node-1" } }]);
      const st = await view.next(1, AbortSignal.timeout(5000));
      expect(st.rev).toBe(2);
      expect([...st.services.get("default/web")!.endpoints.values()][0].IPs!.V4).toEqual(["198.19.1.2"]);

      writeFileSync(path, "kind: [broken");
      await src.reload();
      expect(view.state!.rev).toBe(2);
      expect(log.lines.some((l) => l.includes("ERROR") && l.includes("keeping the last good state"))).toBe(true);
    } finally {
      src.close();
    }
  });

  test("a later edit: a refused object keeps its last valid version, a bad value is skipped; each said once", async () => {
    const path = join(dir, "edits.yaml");
    const node = { kind: "Node", metadata: { name: "node-1" } };
    const write = (items: object[]) => writeFileSync(path, stringify({ kind: "List", items }));
    write([service("web"), service("lb"), node]);
    const brain = new Brain();
    const log = memoryLogger();
    const src = await startFileSource({ path, brain, log, watch: false });
    try {
      const view = brain.view("node-1");
      const badRange = { ...service("lb"), spec: { ...service("lb").spec, externalIPs: ["198.18.64.1", "198.18.64.300"] } };
      write([service("web", 70000), badRange, node]);
      await src.reload();
      await src.reload(); // read again unchanged: nothing more said
      const st = view.state!;
      expect(st.services.get("default/web")!.service.Ports[0].Port).toBe(80);
      expect(st.services.get("default/lb")!.service.IPs!.ExternalIPs!.V4).toEqual(["198.18.64.1"]);
      const warns = log.lines.filter((l) => l.includes("WARN"));
      expect(warns).toHaveLength(2);
      expect(warns[0]).toContain("item 0: service default/web spec.ports[0].port: 70000 is out of range");
      expect(warns[1]).toContain('service default/lb spec.externalIPs[1]: \\"198.18.64.300\\" is not an IP address: skipped');
      expect([...brain.dropped.values()]).toEqual([{ kind: "Service", reason: "malformed", n: 2 }]);
    } finally {
      src.close();
    }
  });

  test("an unreadable file fails at start-up with invalid_argument", async () => {
    const err = await startFileSource({ path: join(dir, "missing.yaml"), brain: new Brain(), log: memoryLogger(), watch: false }).catch(
      (e: unknown) => e,
    );
    expect(isInvalidArgument(err)).toBe(true);
    expect((err as Error).message).toContain("missing.yaml: cannot read input file: ENOENT");
  });
});
