// Typed bindings for the router preview and the cloud cache's counters
// (src-tauri/src/commands/route.rs; the decision is core::router::Decision).
import type { CacheStats, Decision, Finding, Force, Reason, Target } from './generated';
import { command } from './invoke';

export type { Decision, Finding, Force, Reason, Target };
export interface RouteOptions {
  /** The chat the message goes to: its earlier messages count too, as they will when it is sent. */
  sessionId?: string | null;
  needsTools?: boolean;
  needsWeb?: boolean;
  force?: Force;
  /** The user's override for this single message: sensitive content may leave the Mac. */
  allowSensitive?: boolean;
}

/** Where `text` would run, and why, before it is sent. */
export function routePreview(text: string, options: RouteOptions = {}): Promise<Decision> {
  return command('route_preview', {
    text,
    sessionId: options.sessionId ?? null,
    needsTools: options.needsTools ?? false,
    needsWeb: options.needsWeb ?? false,
    force: options.force ?? null,
    allowSensitive: options.allowSensitive ?? false,
  });
}

/** Whether any reason is a sensitive finding. */
export function isSensitive(decision: Decision): boolean {
  return decision.reasons.some((r) => r.code.startsWith('SENSITIVE_'));
}

export type { CacheStats };
/** Lifetime hits and misses of the cloud-answer cache, and what it holds now (for settings). */
export function cloudCacheStats(): Promise<CacheStats> {
  return command('cloud_cache_stats');
}
