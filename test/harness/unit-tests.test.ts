// The choice `npm run test:unit` makes (test/harness/unit-tests.ts): the
// brain, renderers with golden files, parsers and the API in process are in;
// a test that needs root, a network namespace, the Kubernetes binaries or a
// process of its own is out, whichever folder it sits in, and the reason
// printed is the import chain that reaches the host.

import { describe, expect, test } from "bun:test";
import { unitTests } from "./unit-tests.ts";

const { chosen, left } = unitTests();
const leftOut = new Map(left);

describe("npm run test:unit", () => {
  test.each([
    ["the brain", "test/brain/service.test.ts"],
    ["the nft renderer's golden output", "test/nft/render.test.ts"],
    ["the iptables renderer's golden output", "test/iptables/golden.test.ts"],
    ["a parser (kube-proxy's config file)", "test/config/config-file.test.ts"],
    ["the client's replica", "test/api/client/replica.test.ts"],
    ["the import graph", "test/imports.test.ts"],
  ])("%s is in (%s)", (_, file) => {
    expect(leftOut.get(file)).toBeUndefined();
    expect(chosen).toContain(file);
  });

  test.each([
    ["packets in network namespaces", "test/nft/packets.test.ts", "test/harness/netns.ts"],
    ["a real cluster (kube-apiserver, nodes in namespaces)", "test/sources/skew-deployed.test.ts", "test/harness/netns.ts"],
    ["a whole kpng process", "test/userspace/deployed.test.ts", "test/harness/kpng-process.ts"],
    ["a backend's real executor (ipvsadm in a namespace)", "test/ipvs/kernel.test.ts", "(starts a process)"],
    ["a helper two imports away that starts kpng", "test/host/leftovers/migrate.test.ts", "test/deployed/rig.ts"],
  ])("%s is out (%s), said why", (_, file, reason) => {
    expect(chosen).not.toContain(file);
    expect(leftOut.get(file)).toContain(reason);
  });

  test("enough is in to be worth running, and nothing twice", () => {
    expect(chosen.length).toBeGreaterThan(50);
    expect(new Set(chosen).size).toBe(chosen.length);
  });
});
