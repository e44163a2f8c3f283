// Hashes of an item's wire bytes (a Service, an Endpoint, a global item):
// the globalv1 messages' Hash field, and what a client keeps per object to
// recognise one a resync sends again unchanged. Keeping a number, not the
// bytes, matters: the bytes are views into the received HTTP/2 chunks, and a
// view keeps its whole chunk alive (memory that grows with the cluster; see
// docs/results/2026-11.md). Its own module: a sidecar's
// client loads it without the global model's encoder (and the brain behind it).

/** Two FNV-1a 32 lanes over the bytes (the second with another seed and a shift). */
function lanes(b: Uint8Array): [number, number] {
  let h1 = 2166136261;
  let h2 = 0x811c9dc5 ^ 0x5bd1e995;
  for (let i = 0; i < b.length; i++) {
    h1 = Math.imul(h1 ^ b[i], 16777619);
    h2 = Math.imul(h2 ^ b[i], 16777619) ^ (h2 >>> 15);
  }
  return [h1 >>> 0, h2 >>> 0];
}

/**
 * 64-bit hash of an item's body, the message's `Hash` field: kpng's clients
 * keep it to recognise an unchanged object. Not cryptographic, a change marker.
 */
export function hash64(b: Uint8Array): bigint {
  const [h1, h2] = lanes(b);
  return (BigInt(h1) << 32n) | BigInt(h2);
}

/** The same as a 53-bit number: what a client keeps per item (a bigint each would be one more heap cell per item). */
export function hash53(b: Uint8Array): number {
  const [h1, h2] = lanes(b);
  return h1 * 0x200000 + (h2 & 0x1fffff);
}
