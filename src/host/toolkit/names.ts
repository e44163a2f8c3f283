// Stable names from text, as kube-proxy makes its chain names: a digest kept
// short enough for the kernel's name limits and spelled in characters every
// tool accepts.

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/**
 * The first `chars` characters of sha256(`input`) in RFC 4648 base32 (A-Z,
 * 2-7), 5 bits each. Bun's one-shot digest: node:crypto's createHash builds a
 * stream object per call, and a full sync names tens of thousands of chains.
 */
export function hashBase32(input: string, chars: number): string {
  const digest = Bun.SHA256.hash(input) as Uint8Array;
  let out = "";
  let bits = 0;
  let acc = 0;
  for (let i = 0; out.length < chars; i++) {
    acc = ((acc << 8) | digest[i]) & 0xfff; // at most 12 bits are ever pending
    bits += 8;
    while (bits >= 5 && out.length < chars) {
      bits -= 5;
      out += BASE32[(acc >> bits) & 31];
    }
  }
  return out;
}
