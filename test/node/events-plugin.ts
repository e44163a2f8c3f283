// A --plugin backend for the backend-events test: it programs nothing; its
// first sync fails (as a refused transaction would), and it reports its rules
// lost each time the file $KPNG_TEST_LOSE appears (the test creates it, as
// someone flushing the ruleset would), deleting the file.

import { existsSync, unlinkSync } from "node:fs";
import type { BackendFactory, FullStateBackend } from "../../src/host/backend.ts";

const factory: BackendFactory = () => {
  let applies = 0;
  let timer: ReturnType<typeof setInterval> | undefined;
  return {
    name: "flaky",
    kind: "full",
    async apply() {
      if (++applies === 1) throw new Error("injected failure: the first transaction is refused");
    },
    watchRules(report) {
      const file = process.env.KPNG_TEST_LOSE;
      if (!file) return;
      timer = setInterval(() => {
        if (!existsSync(file)) return;
        unlinkSync(file);
        report("the test deleted its table");
      }, 50);
    },
    async close() {
      clearInterval(timer);
    },
  } satisfies FullStateBackend;
};

export default factory;
