// What the `nft -i` session (plugins/nft/session.ts) relies on, checked
// against the real nft and kernel in a network namespace: one line is one
// transaction, errors are reported and told apart from the marker's, and
// the interactive process never evaluates a line against a stale cache,
// whether the ruleset changed by its own commits or by another process; and
// the same for a transaction sent as a file (`include`).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { processSpawner } from "../../plugins/nft/executor.ts";
import { NftSession } from "../../plugins/nft/session.ts";
import { createTopology, type Topology } from "../harness/netns.ts";

let topo: Topology;
let session: NftSession;
/** every transaction as a file */
let files: NftSession;
const nft = (script: string) => topo.exec(topo.node.ns, ["nft", "-f", "-"], script);
const list = (what: string[]) => topo.exec(topo.node.ns, ["nft", "list", ...what]).catch((e: Error) => e.message);

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpti" });
  session = new NftSession(processSpawner(["ip", "netns", "exec", topo.node.ns]));
  files = new NftSession(processSpawner(["ip", "netns", "exec", topo.node.ns]), { inlineMaxBytes: 0 });
});
afterAll(async () => {
  session?.close();
  files?.close();
  await topo?.destroy();
});

describe("nft -i (real)", () => {
  test("one line is one transaction: a refused statement takes back the ones before it", async () => {
    await nft("add table ip one\nadd map ip one m { type ipv4_addr : verdict; }\n");
    const err = await session.apply("add chain ip one a; add element ip one m { 198.18.0.1 : goto nochain }").catch((e: Error) => e);
    expect(String(err)).toContain("No such file or directory");
    expect(String(err)).not.toContain("kpng-sync-");
    expect(await list(["chains", "ip"])).not.toContain("chain a");
    // a new process takes the next line
    await session.apply("add chain ip one a; add element ip one m { 198.18.0.1 : goto a }");
    expect(await list(["map", "ip", "one", "m"])).toContain("198.18.0.1 : goto a");
  });

  test("the cache follows the session's own commits", async () => {
    await session.apply("add table ip own; add map ip own m { type ipv4_addr : verdict; }");
    await session.apply("add element ip own m { 198.18.0.2 : drop }");
    // the same name now holds another type: a cached map would parse 80 as an address
    await session.apply("delete table ip own");
    await session.apply("add table ip own; add map ip own m { type inet_service : verdict; }");
    await session.apply("add element ip own m { 80 : drop }");
    expect(await list(["map", "ip", "own", "m"])).toContain("80 : drop");
  });

  test("the cache follows a change made by another process between two lines", async () => {
    await session.apply("add table ip other; add map ip other m { type ipv4_addr : verdict; }");
    await session.apply("add element ip other m { 198.18.0.3 : drop }");
    await nft("delete table ip other\nadd table ip other\nadd map ip other m { type inet_service : verdict; }\n");
    await session.apply("add element ip other m { 443 : drop }");
    expect(await list(["map", "ip", "other", "m"])).toContain("443 : drop");
    await expect(session.apply("add element ip other m { 198.18.0.4 : drop }")).rejects.toThrow("Error");
  });
});

describe("nft -i include (real)", () => {
  test("an included file is one transaction: a refused statement takes back the ones before it", async () => {
    await nft("add table ip inc\nadd map ip inc m { type ipv4_addr : verdict; }\n");
    const err = await files.apply("add chain ip inc a\nadd element ip inc m { 198.18.0.1 : goto nochain }\n").catch((e: Error) => e);
    expect(String(err)).toContain("In file included from");
    expect(String(err)).toContain("No such file or directory");
    expect(String(err)).not.toContain("kpng-sync-");
    expect(await list(["table", "ip", "inc"])).not.toContain("chain a");
    await files.apply("add chain ip inc a\nadd element ip inc m { 198.18.0.1 : goto a }\n");
    expect(await list(["map", "ip", "inc", "m"])).toContain("198.18.0.1 : goto a");
  });

  test("a syntax error anywhere in the file: nothing of it is applied", async () => {
    const err = await files
      .apply("add chain ip inc b\nadd element ip inc m { 198.18.0.2 : goto b, 1.2.3.4.5 : drop }\n")
      .catch((e: Error) => e);
    expect(String(err)).toContain("syntax error");
    expect(await list(["table", "ip", "inc"])).not.toContain("chain b");
  });

  test("2,000 elements in one file; the next transaction's cache holds them", async () => {
    await nft("add table ip many\nadd set ip many s { type ipv4_addr; }\n");
    const addrs = Array.from({ length: 2000 }, (_, i) => `10.${i >> 8}.${i & 255}.1`);
    await files.apply(`add element ip many s { ${addrs.join(", ")} }\n`);
    await files.apply("delete element ip many s { 10.0.0.1 }");
    const json = JSON.parse(await topo.exec(topo.node.ns, ["nft", "-j", "list", "set", "ip", "many", "s"])) as {
      nftables: { set?: { elem?: string[] } }[];
    };
    const held = json.nftables.flatMap((x) => x.set?.elem ?? []);
    expect({ count: held.length, deleted: held.includes("10.0.0.1"), last: held.includes("10.7.207.1") }).toEqual({
      count: 1999,
      deleted: false,
      last: true,
    });
  });
});
