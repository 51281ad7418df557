// sdk/js/package.json makes the SDK an npm package (`npm install ./sdk/js`, or the tarball of
// `npm pack ./sdk/js`). No registry is reachable from the tests, so this builds what the tarball
// holds (its `files`, plus package.json, which npm always packs), installs that as
// node_modules/<name> of a temporary app, and lets Node's own resolution import the package by
// name: the `exports` map must lead to the SDK and the typings it names must be in the package.
// Where npm is on PATH, `npm pack --dry-run` (offline) must list exactly the same files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as sdk from "../../sdk/js/calling-client.js";

const packageDir = fileURLToPath(new URL("../../sdk/js/", import.meta.url));
const manifest = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8"));

/** What `npm pack` puts in the tarball: the `files` entries (plain files here) and package.json. */
function packedFiles() {
  assert.ok(Array.isArray(manifest.files) && manifest.files.length > 0, "package.json needs a files list");
  for (const name of manifest.files) assert.ok(existsSync(join(packageDir, name)), `files names ${name}, which is missing`);
  return [...new Set([...manifest.files, "package.json"])].sort();
}

const relative = (target) => target.replace(/^\.\//, "");

test("package.json names the package, a version, its module and its typings", () => {
  assert.match(manifest.name, /^(@[a-z0-9-]+\/)?[a-z0-9][a-z0-9._-]*$/);
  assert.match(manifest.version, /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/);
  assert.equal(manifest.type, "module");
  const main = manifest.exports["."];
  assert.equal(Object.keys(main)[0], "types", "`types` must come first: TypeScript takes the first condition that matches");
  const files = packedFiles();
  for (const target of [main.types, main.import, main.default, manifest.types, manifest.main]) {
    assert.ok(files.includes(relative(target)), `${target} is not in the package`);
  }
  assert.equal(relative(main.types), "calling-client.d.ts");
  assert.equal(relative(main.default), "calling-client.js");
});

test("an app that installed the package imports the SDK by name through Node's resolution", (t) => {
  const app = mkdtempSync(join(tmpdir(), "calling-client-pkg-"));
  t.after(() => rmSync(app, { recursive: true, force: true }));
  const installed = join(app, "node_modules", manifest.name);
  for (const name of packedFiles()) {
    mkdirSync(dirname(join(installed, name)), { recursive: true });
    copyFileSync(join(packageDir, name), join(installed, name));
  }
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  writeFileSync(join(app, "main.js"), `
    import { createRequire } from "node:module";
    import * as sdk from ${JSON.stringify(manifest.name)};
    const require = createRequire(import.meta.url);
    const resolved = require.resolve(${JSON.stringify(manifest.name)});
    const manifest = require(${JSON.stringify(`${manifest.name}/package.json`)});
    console.log(JSON.stringify({ exports: Object.keys(sdk).sort(), resolved, types: manifest.exports["."].types,
      client: typeof sdk.CallingClient, error: new sdk.CallingError("x", { code: "network" }).code }));
  `);
  const run = spawnSync(process.execPath, ["main.js"], { cwd: app, encoding: "utf8", timeout: 20_000 });
  assert.equal(run.status, 0, run.stderr);
  const seen = JSON.parse(run.stdout.trim().split("\n").at(-1));
  assert.equal(seen.resolved, join(installed, "calling-client.js"));
  assert.deepEqual(seen.exports, Object.keys(sdk).sort());
  assert.equal(seen.client, "function");
  assert.equal(seen.error, "network");
  // The typings the package names are in the installed copy, not only in the repository.
  const types = readFileSync(join(installed, relative(seen.types)), "utf8");
  assert.match(types, /export class CallingClient\b/);
  // Nothing else of the folder (the demo pages) is part of the package.
  assert.ok(!existsSync(join(installed, "demo")));
});

const npm = spawnSync("npm", ["--version"], { encoding: "utf8" });
test("npm pack (dry run, offline) packs exactly those files", { skip: npm.status === 0 ? false : "no npm on PATH" }, (t) => {
  const cache = mkdtempSync(join(tmpdir(), "calling-client-npm-"));
  t.after(() => rmSync(cache, { recursive: true, force: true }));
  const pack = spawnSync("npm", ["pack", "--dry-run", "--json", "--offline", "--cache", cache, "--logs-dir", cache], {
    cwd: packageDir, encoding: "utf8", timeout: 60_000,
  });
  assert.equal(pack.status, 0, pack.stderr);
  const [info] = JSON.parse(pack.stdout);
  assert.equal(info.name, manifest.name);
  assert.equal(info.version, manifest.version);
  assert.deepEqual(info.files.map((file) => file.path).sort(), packedFiles());
});
