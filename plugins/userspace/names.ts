// The userspace backend's vocabulary: what it creates on the node.

/**
 * Bind mode: the device holding the service addresses the relays listen on
 * (kube-proxy's IPVS mode calls its own kube-ipvs0). A dummy device; where
 * the kernel has no dummy driver, one end of a veth pair whose other end
 * (DEVICE_PEER) stays on the node too, both up without ARP: a device
 * nothing is routed through but the addresses' own local routes.
 */
export const DEVICE = "kpng-dummy0";
export const DEVICE_PEER = "kpng-dummy1";

/** Redirect mode: kpng's nftables tables, one per family. */
export const TABLE = "kpng-userspace";
export const tableFamilies = ["ip", "ip6"] as const;
export type TableFamily = (typeof tableFamilies)[number];
