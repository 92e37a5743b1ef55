// Typed bindings for the router preview and the cloud cache's counters
// (src-tauri/src/commands/route.rs; the decision is core::router::Decision).
import { call } from './invoke';

/** Run this message here or in the cloud (sensitive content still stays local). */
export type Force = 'local' | 'cloud';

export type Target = { kind: 'local'; model: string } | { kind: 'cloud'; provider: string };

/** What a sensitive reason found, masked (`j***@example.com`); offsets are UTF-8 bytes. */
export interface Finding {
  kind:
    | 'cnMobile'
    | 'phone'
    | 'prcId'
    | 'email'
    | 'privateIp'
    | 'intranetHost'
    | 'intranetPath'
    | 'homePath'
    | 'secret';
  masked: string;
  start: number;
  end: number;
}

/** One named reason: a stable `code` (e.g. `SENSITIVE_EMAIL`, `LONG_INPUT`) and a sentence. */
export interface Reason {
  code: string;
  message: string;
  /** Only on `SENSITIVE_*` reasons. */
  finding?: Finding;
  /** Only on `SENSITIVE_*` reasons: null for the new message, else the history index. */
  earlierMessage?: number | null;
}

/** Mirrors `headroom_core::router::Decision`. */
export interface Decision {
  target: Target;
  reasons: Reason[];
  inputTokens: number;
  /** False when no model is loaded and the count is an estimate. */
  tokensExact: boolean;
  thresholdTokens: number;
  neededContext: number;
}

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
  return call<Decision>('route_preview', {
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

/** Mirrors `headroom_store::cloud_cache::CacheStats`. */
export interface CacheStats {
  hits: number;
  misses: number;
  entries: number;
  bytes: number;
}

/** Lifetime hits and misses of the cloud-answer cache, and what it holds now (for settings). */
export function cloudCacheStats(): Promise<CacheStats> {
  return call<CacheStats>('cloud_cache_stats');
}
