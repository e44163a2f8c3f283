// Real parts, inside a network namespace made for this run: this kernel has
// no IPVS, which the executor must report clearly; ipset and iptables are
// real, so the sets, rules and jumps the backend writes are loaded for truth.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { KpngError } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Executor } from "../../src/host/backend.ts";
import { IPVS_DEPRECATION_MESSAGE, createIpvsBackend } from "../../plugins/ipvs/index.ts";
import { commandExecutor } from "../../plugins/ipvs/executor.ts";
import { recorder } from "../harness/command-recorder.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";
import { N1, N1v6, testConfig } from "./harness.ts";
import { endpoint, entry, nodeState, nextState, service } from "./services.ts";

const ns = `kpng-ipvs-${Math.random().toString(36).slice(2, 10)}`;
const inNs = commandExecutor({ prefix: ["ip", "netns", "exec", ns] });
const sh = (argv: string[]) => inNs.run(argv);

beforeAll(async () => {
  await commandExecutor().run(["ip", "netns", "add", ns]);
});
afterAll(async () => {
  await commandExecutor()
    .run(["ip", "netns", "del", ns])
    .catch(() => undefined);
});

const config = testConfig({ nodeIPs: [N1, N1v6], clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR] });

/** ipset and iptables run in the namespace for real; ipvsadm and ip (no IPVS, no dummy links here) are recorded. */
function hybrid(): Executor {
  const rec = recorder();
  return { run: (argv, stdin) => (argv[0] === "ipvsadm" || argv[0] === "ip" ? rec.run(argv, stdin) : inNs.run(argv, stdin)) };
}

const kpngEntries = async () =>
  (await sh(["ipset", "save"]))
    .split("\n")
    .filter((l) => l.startsWith("add KPNG-"))
    .sort();

const web = (pods: number[]) =>
  entry(
    service({
      name: "web",
      clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
      ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
    }),
    Object.fromEntries(
      pods.flatMap((p) => [
        [`p${p}`, endpoint({ ips: [v4.pod(2, p)] })],
        [`p${p}v6`, endpoint({ ips: [v6.pod(2, p)] })],
      ]),
    ),
  );

describe("ipvs on a real kernel", () => {
  test("kernel without IPVS: setup fails with one clear `unavailable` error, after the deprecation warning", async () => {
    const log = memoryLogger();
    const backend = createIpvsBackend({ config, log, out: () => {} }, { executor: inNs, drainIntervalMs: 0 });
    const err = await backend.setup().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(KpngError);
    expect((err as KpngError).code).toBe("unavailable");
    expect((err as KpngError).message).not.toContain("\n");
    expect((err as KpngError).message).toContain("Protocol not available");
    expect(log.lines.some((l) => l.includes("WARN") && l.includes(IPVS_DEPRECATION_MESSAGE))).toBe(true);
  });

  test("a missing tool is `unavailable`, not a crash", async () => {
    const err = await commandExecutor()
      .run(["kpng-no-such-tool"])
      .catch((e: unknown) => e);
    expect((err as KpngError).code).toBe("unavailable");
  });

  test("sets, rules and jumps load into a real kernel; set entries follow syncs exactly", async () => {
    const backend = createIpvsBackend({ config, log: memoryLogger(), out: () => {} }, { executor: hybrid(), drainIntervalMs: 0 });
    const s1 = nodeState(1, [web([1])]);
    await backend.apply(s1, null);
    await backend.apply(s1, null); // a second full sync must not duplicate the jumps
    expect(await kpngEntries()).toEqual(
      [
        `add KPNG-CLUSTER-IP ${v4.clusterIP(1)},tcp:80`,
        `add KPNG-NODE-PORT ${N1},tcp:30080`,
        `add KPNG-6-CLUSTER-IP ${v6.clusterIP(1)},tcp:80`,
        `add KPNG-6-NODE-PORT ${N1v6},tcp:30080`,
      ].sort(),
    );
    for (const tool of ["iptables-save", "ip6tables-save"]) {
      const saved = await sh([tool]);
      expect(saved.match(/-A PREROUTING .*-j KPNG-SERVICES/g)).toHaveLength(1);
      expect(saved.match(/-A INPUT .*-j KPNG-IPVS-FILTER/g)).toHaveLength(1);
      expect(saved).toContain("-j KPNG-MARK-MASQ");
    }

    // all endpoints gone: REJECT entries appear (partial sync, real ipset restore)
    const s2 = nextState(s1, Object.fromEntries([web([])]));
    await backend.apply(s2, new Set(["default/web"]));
    expect((await kpngEntries()).filter((l) => l.includes("REJECT"))).toEqual(
      [
        `add KPNG-REJECT ${v4.clusterIP(1)},tcp:80`,
        `add KPNG-REJECT ${N1},tcp:30080`,
        `add KPNG-6-REJECT ${v6.clusterIP(1)},tcp:80`,
        `add KPNG-6-REJECT ${N1v6},tcp:30080`,
      ].sort(),
    );

    await backend.apply(nextState(s2, { "default/web": undefined }), new Set(["default/web"]));
    expect(await kpngEntries()).toEqual([]);

    await backend.cleanup();
    expect(await sh(["ipset", "list", "-n"])).not.toContain("KPNG-");
    for (const tool of ["iptables-save", "ip6tables-save"]) expect(await sh([tool])).not.toContain("KPNG-");
  });
});
