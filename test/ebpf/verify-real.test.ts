// `kpng verify` for ebpf (issue 36), on the real kernel: programs attached
// to a cgroup and maps pinned on a bpffs of the test's own (sandbox.ts).
// After kpng writes a few Services, the maps read back hold what it wrote;
// a frontend entry deleted by hand, an endpoint slot rewritten, a pin
// removed: each named by Service and frontend, and the metric counts them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { closeSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { createEbpfBackend, type EbpfBackend } from "../../plugins/ebpf/index.ts";
import { cstr, libbpf } from "../../plugins/ebpf/libbpf.ts";
import { backendBytes, backendKeyBytes, frontKeyBytes } from "../../plugins/ebpf/maps.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { createLogger } from "../../src/core/log.ts";
import { driftMetrics, hasDrift } from "../fixtures/drift-metrics.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { endpoint, entry, nextState, nodeState, service } from "../fixtures/state.ts";
import { createSandbox, type Sandbox } from "./sandbox.ts";

let sb: Sandbox;
let backend: EbpfBackend;
let state: NodeState;
const { metrics, drift } = driftMetrics();

const http = { name: "http", port: 80, targetPort: 8080 };
const pods = (...i: number[]) =>
  Object.fromEntries(i.map((n) => [`pod${n}`, endpoint({ ips: [v4.pod(1, n), v6.pod(1, n)], local: true })]));
const web = (...i: number[]) =>
  entry(service({ name: "web", clusterIPs: [v4.clusterIP(30), v6.clusterIP(30)], ports: [http] }), pods(...i));

/** a pinned map's fd for the length of `fn` */
function withMap<T>(name: string, fn: (fd: number) => T): T {
  const fd = libbpf().bpf_obj_get(cstr(join(sb.pinDir, name)));
  expect(fd).toBeGreaterThanOrEqual(0);
  try {
    return fn(fd);
  } finally {
    closeSync(fd);
  }
}

/** kpng's next full sync writes back what a case changed */
async function resync() {
  await backend.apply(state, null);
  expect(await backend.verify()).toEqual([]);
}

beforeAll(async () => {
  sb = await createSandbox();
  backend = await createEbpfBackend(
    {
      config: defaultConfig({ nodeIPs: [v4.node(0), v6.node(0)], ebpf: { cgroup: sb.cgroup, pinDir: sb.pinDir } }),
      log: createLogger("test", { level: "error" }),
      out: () => {},
      metrics,
    },
    { nft: null },
  );
  await backend.setup();
  state = nodeState({
    nodeName: "node0",
    entries: [
      web(1, 2),
      entry(service({ name: "db", clusterIPs: [v4.clusterIP(31)], ports: [{ name: "pg", port: 5432 }] }), pods(3)),
      entry(service({ name: "empty", clusterIPs: [v4.clusterIP(32)], ports: [http] })),
    ],
  });
  await backend.apply(state, null);
}, 60_000);
afterAll(async () => {
  await sb?.destroy();
});

describe("ebpf verify: the maps read back (real kernel)", () => {
  test("after a full sync and a partial one: no difference, the metric says 0", async () => {
    expect(await backend.verify()).toEqual([]);
    state = nextState(state, { set: [web(1, 2, 4)] }).state;
    await backend.apply(state, new Set(["default/web"]));
    expect(await backend.verify()).toEqual([]);
    expect(drift).toEqual([
      { backend: "ebpf", differences: 0 },
      { backend: "ebpf", differences: 0 },
    ]);
  });

  test("a frontend entry deleted by hand: that Service and frontend named as missing, the metric counts it", async () => {
    withMap("kpng_front", (fd) =>
      expect(libbpf().bpf_map_delete_elem(fd, ptr(frontKeyBytes({ family: 4, addr: v4.clusterIP(31), port: 5432, proto: 6 })))).toBe(0),
    );
    const drifts = await backend.verify();
    expect(drifts).toEqual([expect.objectContaining({ service: "default/db", frontend: `${v4.clusterIP(31)}:5432/TCP`, kind: "missing" })]);
    expect(drift.at(-1)).toEqual({ backend: "ebpf", differences: 1 });
    expect(await backend.verify("default/web")).toEqual([]);
    await resync();
  });

  test("an endpoint slot rewritten by hand: named as differing, with what the map holds", async () => {
    const gid = new Uint32Array(1);
    withMap("kpng_front", (fd) =>
      expect(
        libbpf().bpf_map_lookup_elem(fd, ptr(frontKeyBytes({ family: 4, addr: v4.clusterIP(30), port: 80, proto: 6 })), ptr(gid)),
      ).toBe(0),
    );
    withMap("kpng_backend", (fd) =>
      expect(
        libbpf().bpf_map_update_elem(fd, ptr(backendKeyBytes(gid[0], 0)), ptr(backendBytes({ addr: v4.pod(1, 99), port: 8080 })), 0),
      ).toBe(0),
    );
    const drifts = await backend.verify();
    expect(drifts).toHaveLength(1);
    hasDrift(drifts, { service: "default/web", kind: "differs" });
    expect(drifts[0].frontend).toContain(`${v4.clusterIP(30)}:80/TCP`);
    expect(drifts[0].detail).toContain(v4.pod(1, 99));
    await resync();
  });

  test("kpng_front's pin removed by hand: named as missing; the next full sync pins a new map and fills it", async () => {
    const pin = join(sb.pinDir, "kpng_front");
    unlinkSync(pin);
    const drifts = await backend.verify();
    expect(drifts).toEqual([{ service: "", frontend: "", kind: "missing", detail: `pin ${pin}` }]);
    await resync();
  });
});
