// A restore is done when iptables-restore echoes restoredMarker (-v), not at
// its exit (executor.ts): in the kernel, both flavours echo it only once
// every COMMIT before it succeeded, so a refused restore still fails (at its
// exit, without the marker) and an accepted one has its rules in place when
// it settles.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { iptablesExecutor, restoredMarker, spawnExecutor } from "../../plugins/iptables/executor.ts";
import { runCommand } from "../../src/host/toolkit/command.ts";
import { createTopology, type Topology } from "../harness/netns.ts";

const accepted = "*filter\n:KPNG-DONE - [0:0]\n-A KPNG-DONE -j RETURN\nCOMMIT\n*nat\n:KPNG-DONE - [0:0]\n-A KPNG-DONE -j RETURN\nCOMMIT\n";
// filter commits; nat's rule names a chain that does not exist, so its COMMIT is refused
const refusedLast = "*filter\n:KPNG-DONE2 - [0:0]\nCOMMIT\n*nat\n-A KPNG-ABSENT -j RETURN\nCOMMIT\n";

describe("iptables-restore's marker, in the kernel", () => {
  let topo: Topology;
  beforeAll(async () => {
    topo = await createTopology({ pods: 0, prefix: "kprd" });
  });
  afterAll(async () => {
    await topo?.destroy();
  });

  const flavours = ["iptables-nft-restore", "iptables-legacy-restore"].filter((c) => Bun.which(c));

  for (const command of flavours) {
    test(`${command} echoes it after its last COMMIT, and never when a COMMIT is refused`, async () => {
      const run = (input: string) =>
        runCommand(["ip", "netns", "exec", topo.node.ns, command, "--noflush", "-w", "5", "-v"], `${input}${restoredMarker}\n`);
      const ok = await run(accepted);
      expect(ok.code).toBe(0);
      expect(ok.stdout.endsWith(`\n${restoredMarker}\n`) || ok.stdout === `${restoredMarker}\n`).toBe(true);
      const refused = await run(refusedLast);
      expect(refused.code).not.toBe(0);
      expect(refused.stdout).not.toContain(restoredMarker);
      // start the next flavour from empty tables
      await runCommand(["ip", "netns", "exec", topo.node.ns, command], "*filter\nCOMMIT\n*nat\nCOMMIT\n");
    });
  }

  test("the executor's restore: settled means the rules are in; refused means it throws", async () => {
    const ipt = iptablesExecutor(spawnExecutor(["ip", "netns", "exec", topo.node.ns]));
    await ipt.restore("v4", accepted);
    expect(await ipt.chainExists("v4", "nat", "KPNG-DONE")).toBe(true);
    await expect(ipt.restore("v4", refusedLast)).rejects.toThrow("exit");
    await ipt.restore("v4", ["*nat\n", ":KPNG-DONE3 - [0:0]\n", Promise.resolve("-A KPNG-DONE3 -j RETURN\n"), "COMMIT\n"]);
    expect(await topo.exec(topo.node.ns, ["iptables", "-t", "nat", "-S", "KPNG-DONE3"])).toContain("-A KPNG-DONE3 -j RETURN");
  });
});
