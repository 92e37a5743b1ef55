// Charts arrive from Rust (headroom-charts, plotters) as SVG text. We made
// them, but they carry user text (session titles, model names), so they go
// through DOMPurify's SVG profile like anything else put into the page:
// no script, no event handlers, no external references.
import DOMPurify from 'dompurify';

const purify = DOMPurify();

/** Safe inline SVG markup for a chart; '' if nothing svg-like survives. */
export function sanitizeChart(svg: string): string {
  const clean = purify.sanitize(svg, {
    USE_PROFILES: { svg: true, svgFilters: false },
    FORBID_TAGS: ['script', 'foreignObject', 'use', 'image', 'a'],
    FORBID_ATTR: ['href', 'xlink:href'],
  }) as string;
  return clean.trimStart().startsWith('<svg') ? clean : '';
}

/** The theme the charts are drawn in: the system's, as the CSS follows it. */
export function chartTheme(win: Pick<Window, 'matchMedia'> | undefined = globalThis.window): 'light' | 'dark' {
  return win?.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}
