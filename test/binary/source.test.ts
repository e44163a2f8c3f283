// The plugin and sidecar suite, running kpng from source (bun src/main.ts).
import { pluginSuite } from "./suite.ts";

pluginSuite("from source", () => undefined);
