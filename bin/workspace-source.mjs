// Makes Node resolve this repository's packages to their TypeScript sources: adds the "@sandglass/source" export
// condition (packages/sdk/package.json) to every resolution. Imported by whatever runs the sources through tsx; a
// project that installed the packed SDK leaves it out, so it gets the compiled dist/.
import { register } from 'node:module';

const hook = `export async function resolve(specifier, context, next) {
  return next(specifier, { ...context, conditions: [...context.conditions, '@sandglass/source'] });
}`;
register(`data:text/javascript,${encodeURIComponent(hook)}`);
