// Request validation for every Sandglass server: an unknown field is an error (never silently stripped) and bodies are never coerced.
import type { FastifyInstance } from 'fastify';
import { Ajv, type Options } from 'ajv';
// ajv-formats is CommonJS: under NodeNext its plugin function is the import's .default.
import addFormats from 'ajv-formats';

/**
 * Replaces fastify's validator compiler, whose defaults (removeAdditional, coerceTypes) would turn a typo'd field
 * into a silently ignored one and "512" into 512. Query strings and path parameters arrive as text, so only they coerce.
 */
export function installValidation(app: FastifyInstance): void {
  const base: Options = { allErrors: false, removeAdditional: false, useDefaults: true, strict: true };
  const forBody = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
  const forText = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? forBody : forText).compile(schema));
}
