import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './markdown';

function dom(markdown: string): HTMLElement {
  const el = document.createElement('div');
  el.innerHTML = renderMarkdown(markdown);
  return el;
}

describe('renderMarkdown', () => {
  it('renders Markdown: emphasis, lists, code blocks', () => {
    const el = dom('**bold** and `code`\n\n- one\n- two\n\n```rust\nfn main() {}\n```');
    expect(el.querySelector('strong')?.textContent).toBe('bold');
    expect(el.querySelectorAll('li')).toHaveLength(2);
    expect(el.querySelector('pre code')?.textContent).toBe('fn main() {}\n');
  });

  it('renders a half-streamed answer without throwing', () => {
    expect(() => dom('```py\nprint(')).not.toThrow();
    expect(dom('**unfinished').textContent).toContain('unfinished');
  });

  it('drops scripts, event handlers, styles and frames', () => {
    const el = dom(
      'hi <script>alert(1)</script><img src=x onerror="alert(2)"><iframe src="https://evil.example"></iframe>' +
        '<style>body{display:none}</style><div onclick="alert(3)" style="position:fixed">x</div><form><input></form>',
    );
    expect(el.querySelector('script, iframe, style, form, input')).toBeNull();
    expect(el.innerHTML).not.toMatch(/onerror|onclick|alert|style=/);
  });

  it('removes javascript:, data: and vbscript: links but keeps web links, with no target of their own', () => {
    const el = dom(
      '[a](javascript:alert(1)) [b](JAVASCRIPT:alert(1)) [c](data:text/html,<script>x</script>) ' +
        '[d](vbscript:x) <a href=" javascript:alert(1)">e</a> [f](https://example.com/page) ' +
        '<a href="https://example.com/t" target="_self" download ping="https://tracker.example">g</a>',
    );
    const links = [...el.querySelectorAll('a')];
    expect(links.map((a) => a.getAttribute('href'))).toEqual([
      null,
      null,
      null,
      null,
      null,
      'https://example.com/page',
      'https://example.com/t',
    ]);
    // The popover never follows a link itself (links/links.ts opens them in the browser).
    for (const a of links) {
      expect(a.getAttribute('target')).toBeNull();
      expect(a.hasAttribute('download') || a.hasAttribute('ping')).toBe(false);
    }
    expect(links[5]?.getAttribute('rel')).toBe('noopener noreferrer');
  });

  it('treats an image map\'s <area> like a link', () => {
    const el = dom(
      '<map name="m"><area href="javascript:alert(1)" coords="0,0,1,1"><area href="https://example.com/ok" target="_blank" coords="0,0,1,1"></map>',
    );
    const areas = [...el.querySelectorAll('area')];
    expect(areas.map((a) => a.getAttribute('href'))).toEqual([null, 'https://example.com/ok']);
    expect(areas.map((a) => a.getAttribute('target'))).toEqual([null, null]);
  });

  it('loads no remote images', () => {
    const el = dom('![x](https://tracker.example/p.png) <img src="//cdn.example/a.gif" srcset="https://a.example/b.png 2x">');
    for (const img of el.querySelectorAll('img')) {
      expect(img.getAttribute('src')).toBeNull();
      expect(img.getAttribute('srcset')).toBeNull();
    }
  });

  it('keeps text that merely looks like HTML as text', () => {
    expect(dom('`<script>`').querySelector('code')?.textContent).toBe('<script>');
  });
});
