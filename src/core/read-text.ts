// Reading a file the operator named: an unreadable one is bad input, said in
// one line with the file and the errno (`cluster.yaml: cannot read input file: ENOENT`).
// Bytes that are not UTF-8 text are bad input too: decoding them with
// replacement characters would hand the parser something nobody wrote.

import { readFile } from "node:fs/promises";
import { errorMessage, invalid } from "./errors.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true });

export async function readTextFile(path: string, what: string): Promise<string> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw invalid(`${path}: cannot read ${what}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
  }
  try {
    return utf8.decode(bytes);
  } catch {
    const at = firstInvalidUtf8(bytes);
    const where = at < 0 ? "" : ` (byte 0x${bytes[at].toString(16).padStart(2, "0")} at offset ${at})`;
    throw invalid(`${path}: the ${what} is not UTF-8 text${where}`);
  }
}

/** Offset of the first byte that does not start a well-formed UTF-8 sequence, for the message only; -1 if none is found. */
export function firstInvalidUtf8(b: Uint8Array): number {
  for (let i = 0; i < b.length; ) {
    const c = b[i];
    const n = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2 : c >= 0xf0 && c < 0xf5 ? 3 : -1;
    if (n < 0) return i;
    for (let k = 1; k <= n; k++) if (i + k >= b.length || (b[i + k] & 0xc0) !== 0x80) return i;
    i += n + 1;
  }
  return -1;
}
