import { spawnSync } from "node:child_process";
import { cp, readdir, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";

// Builds the library's JavaScript with declarations into dist/lib/ (tsconfig.build.json), for
// Node, which runs no TypeScript from node_modules, and Deno. Run by `npm pack` (prepack). The
// files our code opens beside itself (the web page's assets, the hashing workers) are copied
// where its `new URL(..., import.meta.url)` finds them. The modules loaded on demand (the model
// runner, each runtime's adapter) are named in the config's `files`: tsc follows static imports only.
//
//   npm run build

const root = join(import.meta.dirname, "..");
const out = join(root, "dist", "lib");

await rm(out, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const built = spawnSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { cwd: root, stdio: "inherit" });
if (built.status !== 0) process.exit(built.status ?? 1);
await cp(join(root, "src", "web", "assets"), join(out, "src", "web", "assets"), { recursive: true });
const store = join("src", "models", "store");
for (const name of await readdir(join(root, store))) if (name.endsWith(".js")) await cp(join(root, store, name), join(out, store, name));
console.log(`built into ${out}`);
