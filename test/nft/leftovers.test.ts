// What the nft backend says it, and kube-proxy's nftables mode, leave behind
// (its index.ts, read by the host's leftovers sweep and its watch for another
// proxy): one table per family each.

import { expect, test } from "bun:test";
import { NFT_FOOTPRINT } from "../../plugins/nft/index.ts";
import { FAMILIES, TABLE } from "../../plugins/nft/names.ts";

test("kpng's tables are the backend's own, in each family it writes", () => {
  expect(NFT_FOOTPRINT.kpng.tables).toEqual(FAMILIES.map((family) => ({ family, name: TABLE })));
  expect(NFT_FOOTPRINT.kpng.tables.map((t) => `${t.family} ${t.name}`)).toEqual(["ip kpng", "ip6 kpng"]);
});

test("kube-proxy's nftables mode: a kube-proxy table in ip and ip6 (pkg/proxy/nftables)", () => {
  expect(NFT_FOOTPRINT["kube-proxy"].tables.map((t) => `${t.family} ${t.name}`)).toEqual(["ip kube-proxy", "ip6 kube-proxy"]);
});
