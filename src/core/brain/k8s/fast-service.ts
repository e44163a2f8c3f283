// ServiceSchema (objects.ts), checked by hand as fast-slice.ts checks slices:
// valibot's generic walk costs several times this straight code at start-up,
// on the thread that reads the list (see docs/results/2026-11.md). Both are
// made from the one description of a Service's fields (service-fields.ts):
// this accepts exactly what the schema accepts and returns the same output
// (test/brain/fast-service.test.ts runs both over a table of valid and
// invalid services); on anything it does not accept (not well-formed: an
// unknown value, an address not as kube-proxy prints it, or invalid) it
// returns null and objects.ts takes the slow path: valibot's shape (which
// names the field and the why of what no API server holds), then read.ts.

import { FAIL, metadata, opt, type Obj } from "./fast-check.ts";
import { objectCheck } from "./fields.ts";
import type { K8sService } from "./objects.ts";
import { SERVICE_SPEC, SERVICE_STATUS } from "./service-fields.ts";

const spec = objectCheck(SERVICE_SPEC);
const status = SERVICE_STATUS.kind.check;

/**
 * ServiceSchema's output for `raw`, or null when it is not valid (valibot
 * then says why). `kind` is what the object is said to be: list items carry
 * none, their list says.
 */
export function fastService(raw: Obj, kind: unknown = raw.kind): K8sService | null {
  if (kind !== "Service") return null;
  const meta = metadata(raw.metadata);
  if (meta === FAIL) return null;
  const sp = spec(raw.spec);
  if (sp === FAIL) return null;
  const out: Obj = { kind: "Service", metadata: meta, spec: sp };
  if (!opt(raw, "status", out, status)) return null;
  return out as K8sService;
}
