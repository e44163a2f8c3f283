// A --plugin backend for `kpng verify` tests: it programs nothing, and its
// read-back reports the drifts listed in the JSON file $KPNG_TEST_DRIFTS
// names (re-read at each verify: a test edits it as someone would edit the
// kernel), narrowed to the Service asked for, as a real backend narrows it.

import { readFileSync } from "node:fs";
import type { BackendFactory, Drift, FullStateBackend } from "../../src/host/backend.ts";

const factory: BackendFactory = () =>
  ({
    name: "drifty",
    kind: "full",
    async apply() {},
    async verify(service?: string) {
      const file = process.env.KPNG_TEST_DRIFTS;
      const all = file ? (JSON.parse(readFileSync(file, "utf8")) as Drift[]) : [];
      return all.filter((d) => service === undefined || d.service === service);
    },
  }) satisfies FullStateBackend;

export default factory;
