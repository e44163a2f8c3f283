// The wire's leaf room (src/core/wire/): the byte comparison the server, the
// global model and the watch streams use to decide "unchanged", and the item
// hashes (globalv1's Hash field, and what a client keeps per object).

import { describe, expect, test } from "bun:test";
import { hash53, hash64 } from "../../src/core/wire/item-hash.ts";
import { sameBytes } from "../../src/core/wire/ops.ts";

/** `bytes` as a view into a bigger buffer, as a received HTTP/2 chunk holds a message */
const viewOf = (bytes: number[]) => new Uint8Array(Uint8Array.from([9, 9, ...bytes, 9]).buffer, 2, bytes.length);

describe("sameBytes", () => {
  test("the same array, and equal contents in another array or a view into a bigger buffer, are the same", () => {
    const a = Uint8Array.of(1, 2, 3);
    expect(sameBytes(a, a)).toBe(true);
    expect(sameBytes(a, Uint8Array.of(1, 2, 3))).toBe(true);
    expect(sameBytes(viewOf([1, 2, 3]), a)).toBe(true);
  });

  test("other contents or another length are not", () => {
    expect(sameBytes(Uint8Array.of(1, 2, 3), Uint8Array.of(1, 2, 4))).toBe(false);
    expect(sameBytes(Uint8Array.of(1, 2, 3), Uint8Array.of(1, 2))).toBe(false);
    expect(sameBytes(viewOf([1, 2]), Uint8Array.of(1, 2, 9))).toBe(false);
  });
});

describe("item hashes", () => {
  test("a hash depends on the bytes only, not on where they sit", () => {
    expect(hash64(viewOf([1, 2, 3]))).toBe(hash64(Uint8Array.of(1, 2, 3)));
    expect(hash53(viewOf([1, 2, 3]))).toBe(hash53(Uint8Array.of(1, 2, 3)));
  });

  test("a changed byte changes both hashes; hash53 fits a number exactly", () => {
    const a = Uint8Array.of(1, 2, 3);
    const b = Uint8Array.of(1, 2, 4);
    expect(hash64(a)).not.toBe(hash64(b));
    expect(hash53(a)).not.toBe(hash53(b));
    expect(Number.isSafeInteger(hash53(a))).toBe(true);
    expect(hash64(a) < 1n << 64n).toBe(true);
  });
});
