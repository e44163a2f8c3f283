// The backend toolkit (src/host/toolkit/): the questions every backend
// asks, answered once, and the rule that keeps the core and the backends
// apart: a backend imports the toolkit and nothing else of kpng, and the
// core imports neither the plugin host nor a backend.

import { describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { defaultConfig } from "../../../src/core/config/config.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import type { BackendContext } from "../../../src/host/backend.ts";
import { loadBackend } from "../../../src/host/loader.ts";
import * as toolkit from "../../../src/host/toolkit/index.ts";
import {
  externallyAccessible,
  hostPort,
  ipsOf,
  ipVersion,
  servedInFamily,
  splitHostPort,
  type Family,
} from "../../../src/host/toolkit/index.ts";
import { v4, v6 } from "../../fixtures/addresses.ts";
import { service } from "../../fixtures/state.ts";

const ROOT = resolve(import.meta.dir, "../../..");

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && /\.(ts|mts|js)$/.test(e.name))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

/** relative module specifiers of a file (static imports, re-exports, dynamic imports), resolved from the repository root */
function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  const specs = [
    ...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;"'`]*?from\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)|(?:^|\n)import\s+"([^"]+)"/g),
  ].map((m) => m[1] ?? m[2] ?? m[3]);
  return specs.filter((s) => s.startsWith(".")).map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

describe("who imports what", () => {
  test("a backend imports kpng through the toolkit only (and another backend through its entry)", () => {
    const bad: string[] = [];
    for (const file of sources("plugins")) {
      const own = file.split("/").slice(0, 2).join("/");
      for (const target of importsOf(file)) {
        if (target.startsWith(`${own}/`)) continue;
        if (target === "src/host/toolkit/index.ts") continue;
        if (/^plugins\/[^/]+\/index\.ts$/.test(target)) continue; // composing a backend whole (ebpf over nft)
        bad.push(`${file} -> ${target}`);
      }
    }
    expect(bad).toEqual([]);
  });

  test("the core imports neither the plugin host nor a backend", () => {
    const bad = sources("src/core").flatMap((file) =>
      importsOf(file)
        .filter((t) => t.startsWith("src/host/") || t.startsWith("plugins/"))
        .map((t) => `${file} -> ${t}`),
    );
    expect(bad).toEqual([]);
  });

  test("the examples import kpng through the toolkit and the client library's entries", () => {
    const allowed = new Set(["src/host/toolkit/index.ts", "src/host/run.ts", "src/core/api/client/index.ts"]);
    const bad = sources("examples").flatMap((file) =>
      importsOf(file)
        .filter((t) => !allowed.has(t))
        .map((t) => `${file} -> ${t}`),
    );
    expect(bad).toEqual([]);
  });
});

/** loads a plugin whose backend carries `seen: <expr>` (an expression of ctx), as `--plugin` does */
async function pluginSeeing(expr: string): Promise<{ seen: unknown; ctx: BackendContext }> {
  const dir = mkdtempSync(join(tmpdir(), "kpng-toolkit-"));
  try {
    const file = join(dir, "plugin.ts");
    writeFileSync(file, `export default (ctx) => ({ name: "t", kind: "full", apply: async () => {}, seen: ${expr} });\n`);
    const ctx: BackendContext = { config: defaultConfig(), log: memoryLogger(), out: () => {} };
    const b = (await loadBackend({ plugin: file }, ctx)) as unknown as { seen: unknown };
    return { seen: b.seen, ctx };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("a plugin sees the same toolkit", () => {
  test("the loader hands every backend the toolkit's functions as ctx.toolkit (a --plugin in the binary can import types only)", async () => {
    const { seen, ctx } = await pluginSeeing(`ctx.toolkit.hostPort("2001:db8::1", 80)`);
    expect(seen).toBe("[2001:db8::1]:80");
    expect({ ...ctx.toolkit }).toMatchObject({ ...toolkit });
  });

  test("ctx.toolkit still has protobuf-es' ServiceSchema and EndpointSchema, the generated file's own (plugins written against the earlier toolkit)", async () => {
    const { seen, ctx } = await pluginSeeing("[ctx.toolkit.ServiceSchema.typeName, ctx.toolkit.EndpointSchema.typeName]");
    const gen = await import("../../../src/gen/localv1/services_pb.ts");
    expect(seen).toEqual([gen.ServiceSchema.typeName, gen.EndpointSchema.typeName]);
    expect(ctx.toolkit!.ServiceSchema).toBe(gen.ServiceSchema);
    expect(ctx.toolkit!.EndpointSchema).toBe(gen.EndpointSchema);
  });
});

describe("a service's families and reach", () => {
  const port = (nodePort = 0) => ({ name: "http", port: 80, nodePort });
  const cases: {
    name: string;
    svc: Parameters<typeof service>[0];
    nodePorts?: boolean;
    served: Record<Family, boolean>;
    accessible: Record<Family, boolean>;
  }[] = [
    {
      name: "single-stack IPv4 cluster IP: served in IPv4 only, not reachable from outside",
      svc: { name: "a", clusterIPs: [v4.clusterIP(1)], ports: [port()] },
      served: { v4: true, v6: false },
      accessible: { v4: false, v6: false },
    },
    {
      name: "dual-stack node port: served and reachable in both families",
      svc: { name: "b", clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)], ports: [port(30080)] },
      served: { v4: true, v6: true },
      accessible: { v4: true, v6: true },
    },
    {
      name: "node port where node ports answer on no address: reachable only by its external IP's family",
      svc: { name: "c", clusterIPs: [v4.clusterIP(1)], externalIPs: [v6.external(1)], ports: [port(30080)] },
      nodePorts: false,
      served: { v4: true, v6: false },
      accessible: { v4: false, v6: true },
    },
    {
      name: "no cluster IP: served in the families of its external and LB IPs",
      svc: { name: "d", lbIPs: [v6.external(2)], ports: [port()] },
      served: { v4: false, v6: true },
      accessible: { v4: false, v6: true },
    },
  ];
  test.each(cases)("$name", ({ svc, nodePorts, served, accessible }) => {
    const s = service(svc);
    for (const f of ["v4", "v6"] as const) {
      expect(servedInFamily(s, f)).toBe(served[f]);
      expect(externallyAccessible(s, s.Ports[0], f, nodePorts)).toBe(accessible[f]);
    }
  });
});

describe("addresses", () => {
  test("ipsOf keeps the family's addresses only, and returns a clean list as it is", () => {
    const clean = { V4: [v4.pod(1, 1)], V6: [v6.pod(1, 1)] } as never;
    expect(ipsOf(clean, "v4")).toBe((clean as { V4: string[] }).V4);
    expect(ipsOf({ V4: ["198.18.0.1", "2001:db8::1", "not-an-ip"], V6: [] } as never, "v4")).toEqual(["198.18.0.1"]);
    expect(ipsOf(undefined, "v6")).toEqual([]);
    // every address checked whole, wherever it sits in the list (not from the character at its index)
    expect(ipsOf({ V4: ["not-an-ip", "1.2.3.4", "10.0.0.1"], V6: [] } as never, "v4")).toEqual(["1.2.3.4", "10.0.0.1"]);
  });

  test.each([
    { name: "IPv4", ip: "198.18.0.1", port: 80, text: "198.18.0.1:80" },
    { name: "IPv6 is bracketed", ip: "2001:db8::1", port: 53, text: "[2001:db8::1]:53" },
  ])("hostPort and splitHostPort: $name", ({ ip, port, text }) => {
    expect(hostPort(ip, port)).toBe(text);
    expect(splitHostPort(text)).toEqual({ ip, port });
  });

  test.each(["198.18.0.1", "[2001:db8::1]", "2001:db8::1:80", "[]:80", ":80", "198.18.0.1:x"])("splitHostPort refuses %p", (s) => {
    expect(splitHostPort(s)).toBeUndefined();
  });

  test("IP versions for the edges that speak numbers", () => {
    expect([ipVersion("v4"), ipVersion("v6")]).toEqual([4, 6]);
  });
});
