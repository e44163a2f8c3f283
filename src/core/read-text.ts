// Reading a file the operator named: an unreadable one is bad input, said in
// one line with the file and the errno (`cluster.yaml: cannot read input file: ENOENT`).

import { readFile } from "node:fs/promises";
import { errorMessage, invalid } from "./errors.ts";

export async function readTextFile(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    throw invalid(`${path}: cannot read ${what}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
  }
}
