// The console builds into internal/console/dist, which the Go package
// embeds (go:embed all:dist). Relative asset URLs are not needed: the
// console is always served at the root of the API listener.
import { defineConfig } from "vite";

export default defineConfig({
  build: {
    outDir: "../../internal/console/dist",
    // The Makefile clears old builds but keeps dist/.gitignore, the file
    // that lets a fresh clone compile; Vite must not delete it.
    emptyOutDir: false,
    target: "es2022",
    // No inline scripts or data: modules: the CSP allows only 'self'.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
