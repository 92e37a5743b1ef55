import { describe, expect, it } from 'vitest';
import { chartTheme, sanitizeChart } from './svg';

describe('sanitizeChart', () => {
  it('keeps the drawing and drops anything that runs or loads', () => {
    const svg =
      '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200" onload="alert(1)">' +
      '<script>alert(2)</script><circle class="point" cx="1" cy="2" r="3"/>' +
      '<text x="0" y="10">tok/s</text><image href="http://example.com/x.png"/>' +
      '<a href="javascript:alert(3)"><rect width="1" height="1"/></a></svg>';
    const clean = sanitizeChart(svg);
    expect(clean.startsWith('<svg')).toBe(true);
    expect(clean).toContain('<circle class="point"');
    expect(clean).toContain('tok/s');
    for (const bad of ['onload', '<script', 'alert', '<image', 'javascript:', 'example.com']) expect(clean).not.toContain(bad);
  });

  it('gives nothing for text that is not an SVG', () => {
    expect(sanitizeChart('<img src=x onerror=alert(1)>')).toBe('');
    expect(sanitizeChart('')).toBe('');
  });

  it('follows the system theme', () => {
    const dark = { matchMedia: (q: string) => ({ matches: q.includes('dark') }) as MediaQueryList };
    const light = { matchMedia: () => ({ matches: false }) as unknown as MediaQueryList };
    expect(chartTheme(dark)).toBe('dark');
    expect(chartTheme(light)).toBe('light');
    expect(chartTheme(undefined)).toBe('light');
  });
});
