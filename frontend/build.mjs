// Bundles src/ into one ES module that TensorBoard loads into the tab's iframe:
// ../tfbneck_plugin/plugin/static/index.js (committed, so `pip install` needs no Node).
// TensorBoard's content security policy blocks CDNs: everything, Chart.js included, is
// in that one file. Usage: npm ci && npm run build   (npm run watch while developing)
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const options = {
  entryPoints: [path.join(here, "src", "index.js")],
  outfile: path.join(here, "..", "tfbneck_plugin", "plugin", "static", "index.js"),
  bundle: true,
  format: "esm",
  minify: true,
  target: ["chrome100", "firefox100", "safari15"],
  loader: { ".css": "text" },
  legalComments: "eof",
  banner: { js: "// tfbneck: the TensorBoard 'Bottleneck' tab. Built from frontend/ by `npm run build`; do not edit." },
  logLevel: "info",
};

if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
