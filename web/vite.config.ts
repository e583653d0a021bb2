// Builds the console into HF_CONSOLE_OUT (CMake sets it to the build tree's
// web/dist; hf-server serves that directory at /). Relative asset paths, so
// the console works behind a reverse proxy under any prefix.
import { defineConfig } from "vite";

export default defineConfig({
  base: "./",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: process.env.HF_CONSOLE_OUT ?? "dist",
    emptyOutDir: true,
    sourcemap: true,
    chunkSizeWarningLimit: 600,
  },
});
