// Lets node 20 load @actions/workflow-parser, which imports its JSON schema without an
// import attribute (bundlers allow that; node 20 does not): JSON files are served as ES
// modules that export the parsed value. Used as: node --import ./json-modules.mjs
import { register } from 'node:module';

if (!process.env.HATCHERY_JSON_HOOKS) {
  process.env.HATCHERY_JSON_HOOKS = '1';
  register(import.meta.url, import.meta.url);
}

export async function load(url, context, nextLoad) {
  if (url.startsWith('file:') && url.endsWith('.json') && !context.importAttributes?.type) {
    const { readFileSync } = await import('node:fs');
    const { fileURLToPath } = await import('node:url');
    return { format: 'module', shortCircuit: true, source: `export default ${readFileSync(fileURLToPath(url), 'utf8')};` };
  }
  return nextLoad(url, context);
}
