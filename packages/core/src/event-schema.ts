// The strict check of an event's data against spec/events.yaml: what the node API admits from a node, nothing looser.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
// ajv-formats is CommonJS: under NodeNext its plugin function is the import's .default.
import addFormats from 'ajv-formats';
import { EVENT_SPECS, type EventData, type EventType } from './api/events.generated.js';

export type { EventData, EventDataMap, EventType } from './api/events.generated.js';

/** What an event is about: a sandbox (it names one), a tenant, or the platform itself (tenant `system`). */
export type EventScope = 'sandbox' | 'tenant' | 'system';

export interface EventSpec {
  scope: EventScope;
  /** Whether a node may send it over the node API: the types a gateway records. */
  node: boolean;
}

/** Every event type the platform records, in the spec's order. */
export const EVENT_TYPES = Object.keys(EVENT_SPECS) as EventType[];

export function isEventType(type: string): type is EventType {
  return Object.hasOwn(EVENT_SPECS, type);
}

export function eventSpec(type: EventType): EventSpec {
  const { scope, node } = EVENT_SPECS[type];
  return { scope, node };
}

/** Where an event's data breaks its schema: `field` is a JSON pointer into the event (`/data/snapshotId`). */
export interface EventDataProblem {
  field: string;
  message: string;
}

// No defaults, no coercion, no stripping: data is checked exactly as it will be hashed into the log.
const ajv = addFormats.default(new Ajv({ allErrors: false, strict: true, allowUnionTypes: true, useDefaults: false, coerceTypes: false }));
const compiled = new Map<EventType, ValidateFunction>();

function validatorOf(type: EventType): ValidateFunction {
  let v = compiled.get(type);
  if (!v) {
    // Compiled once per type, on first use: a process that never checks an event pays nothing.
    v = ajv.compile(EVENT_SPECS[type].data as object);
    compiled.set(type, v);
  }
  return v;
}

const pointerToken = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

function problemOf(type: EventType, err: ErrorObject): EventDataProblem {
  const at = `/data${err.instancePath}`;
  if (err.keyword === 'required') {
    const name = (err.params as { missingProperty: string }).missingProperty;
    return { field: `${at}/${pointerToken(name)}`, message: `${type} wants data field ${name}` };
  }
  if (err.keyword === 'additionalProperties') {
    const name = (err.params as { additionalProperty: string }).additionalProperty;
    return { field: `${at}/${pointerToken(name)}`, message: `${name} is not a field of ${type}${err.instancePath ? ` at ${at}` : ''}` };
  }
  return { field: at, message: `${at} ${err.message ?? 'does not fit the schema'} (${type})` };
}

/** Undefined when `data` fits the schema of `type`; otherwise the first field that does not, and why. */
export function eventDataProblem(type: EventType, data: unknown): EventDataProblem | undefined {
  const validate = validatorOf(type);
  if (validate(data)) return undefined;
  const err = validate.errors?.[0];
  return err ? problemOf(type, err) : { field: '/data', message: `data does not fit ${type}` };
}

/** A type guard over eventDataProblem, for code that goes on to read the data as its type. */
export function isEventData<T extends EventType>(type: T, data: unknown): data is EventData<T> {
  return eventDataProblem(type, data) === undefined;
}
