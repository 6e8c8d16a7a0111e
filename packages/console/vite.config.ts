// Built once at setup time (scripts/setup.mjs) into dist/, which the control plane serves under /console.
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/console/',
  plugins: [react()],
  // No inline module-preload polyfill: the page's CSP allows scripts from 'self' only. React and xterm.js make one ~560 kB chunk.
  build: { outDir: 'dist', emptyOutDir: true, modulePreload: { polyfill: false }, sourcemap: false, chunkSizeWarningLimit: 1024 },
});
