// kpng get's and kpng verify's text (format.ts): kubectl's columns, the
// endpoints' marks, and the verdicts.

import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { ServicesReplySchema, VerifyReplySchema } from "../../src/gen/introspectv1/introspect_pb.ts";
import { formatServices, formatVerify, table } from "../../src/core/introspect/format.ts";

const reply = create(ServicesReplySchema, {
  nodeName: "node-1",
  revision: 7n,
  backends: [{ name: "nft", revision: 6n, appliedUnixMs: 1_700_000_000_000n, syncSeconds: 0.0042, error: "" }],
  services: [
    {
      namespace: "shop",
      name: "api",
      type: "NodePort",
      external: true,
      externalTrafficPolicy: "Local",
      internalTrafficPolicy: "Cluster",
      ports: [
        {
          name: "http",
          protocol: "TCP",
          port: 80,
          nodePort: 30080,
          frontends: [
            { kind: "clusterIP", ip: "198.18.0.11", port: 80, scope: "internal" },
            { kind: "nodePort", ip: "203.0.113.11", port: 30080, scope: "external" },
            { kind: "nodePort", ip: "2001:db8:3::b", port: 30080, scope: "external" },
          ],
        },
      ],
      endpoints: [
        { ip: "198.19.1.20", nodeName: "node-1", ready: true, internal: { used: true }, external: { used: true }, ports: { http: 8080 } },
        {
          ip: "198.19.2.20",
          nodeName: "node-2",
          ready: true,
          internal: { used: true },
          external: { used: false, reason: "OtherNode", message: "on node node-2: the traffic policy is Local" },
          ports: { http: 8080 },
        },
        {
          key: "api-3",
          ip: "198.19.3.20",
          nodeName: "node-3",
          terminating: true,
          serving: true,
          internal: { used: false, reason: "Terminating", message: "terminating" },
          external: { used: false, reason: "OtherNode", message: "on node node-3" },
          ports: { http: 8080 },
        },
      ],
    },
  ],
});

describe("kpng get's columns", () => {
  test("a table pads each column to its widest cell, three spaces apart, no trailing blanks", () => {
    expect(table(["A", "BB"], [["xxxx", "y"]])).toBe("A      BB\nxxxx   y\n");
  });

  test("services: one row per port, node ports with their addresses, left-out endpoints with their reason", () => {
    const rows = formatServices(reply, "services", "table")
      .trimEnd()
      .split("\n")
      .map((l) => l.split(/\s{3,}/));
    expect(rows).toEqual([
      ["NAMESPACE", "NAME", "TYPE", "PORT", "FRONTENDS", "INTERNAL-ENDPOINTS", "EXTERNAL-ENDPOINTS", "LEFT-OUT"],
      [
        "shop",
        "api",
        "NodePort",
        "http:80/TCP",
        "198.18.0.11:80,nodePort:30080@203.0.113.11+2001:db8:3::b",
        "198.19.1.20:8080,198.19.2.20:8080",
        "198.19.1.20:8080",
        "198.19.3.20(Terminating)",
      ],
    ]);
  });

  test("-o wide: policies and affinity, then the node's revision and what each backend holds", () => {
    const out = formatServices(reply, "services", "wide");
    expect(out).toContain("Cluster/Local");
    expect(out).toContain("NODE node-1   REVISION 7\n");
    expect(out.trimEnd().split("\n").slice(-2)).toEqual([
      "BACKEND   REVISION   APPLIED                    SYNC   LAST-ERROR",
      "nft       6          2023-11-14T22:13:20.000Z   4ms    -",
    ]);
  });

  test("endpoints: conditions and each scope's use; -o wide gives the reasons as sentences", () => {
    const rows = formatServices(reply, "endpoints", "wide").split("\n");
    expect(rows[3].split(/\s{3,}/)).toEqual([
      "shop",
      "api",
      "198.19.3.20",
      "node-3",
      "false",
      "true",
      "true",
      "Terminating",
      "OtherNode",
      "<none>",
      "api-3",
      "http:8080",
      "terminating; on node node-3",
    ]);
  });

  test("-o json: everything, lowerCamelCase", () => {
    const json = JSON.parse(formatServices(reply, "services", "json"));
    expect(json.services[0].endpoints[1].external).toEqual({
      used: false,
      reason: "OtherNode",
      message: "on node node-2: the traffic policy is Local",
    });
    expect(json.backends[0]).toMatchObject({ name: "nft", revision: "6", appliedUnixMs: "1700000000000" });
  });
});

describe("kpng verify's rows", () => {
  test("each drift by backend, Service and frontend; a failed read and a backend without read-back say so", () => {
    const out = formatVerify(
      create(VerifyReplySchema, {
        backends: [
          { name: "nft", supported: true, drifts: [{ service: "", frontend: "", kind: "missing", detail: "chain services" }] },
          { name: "iptables", supported: true, error: "iptables-save: exit 1" },
          { name: "jsonl", supported: false },
        ],
      }),
      "table",
    );
    expect(
      out
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((l) => l.split(/\s{3,}/)),
    ).toEqual([
      ["nft", "<base rules>", "-", "missing", "chain services"],
      ["iptables", "-", "-", "error", "iptables-save: exit 1"],
      ["jsonl", "-", "-", "not-supported", "this backend cannot read the kernel back"],
    ]);
  });
});
