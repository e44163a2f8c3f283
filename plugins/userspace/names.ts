// The userspace backend's vocabulary: what it creates on the node.

/**
 * Bind mode: the protocol number of kpng's local routes (local-routes.ts),
 * which tells them apart from every other route of the local table. 156 is
 * unassigned in iproute2's rt_protos.
 */
export const ROUTE_PROTO = 156;

/** Redirect mode: kpng's nftables tables, one per family. */
export const TABLE = "kpng-userspace";
export const tableFamilies = ["ip", "ip6"] as const;
export type TableFamily = (typeof tableFamilies)[number];
