import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { renderMarkdown } from '../chat/markdown';
import { installLinkHandler, OPEN_FAILED_CLASS } from './links';

describe('installLinkHandler', () => {
  let opened: string[];
  let remove: () => void;
  let container: HTMLElement;
  const startUrl = window.location.href;

  beforeEach(() => {
    opened = [];
    remove = installLinkHandler(document, async (url) => {
      opened.push(url);
    });
    container = document.createElement('div');
    document.body.append(container);
  });

  afterEach(() => {
    remove();
    container.remove();
  });

  /** Clicks like a user; returns whether the click was cancelled. */
  function click(el: Element, init: MouseEventInit = {}, type = 'click'): boolean {
    const event = new MouseEvent(type, { bubbles: true, cancelable: true, button: 0, ...init });
    el.dispatchEvent(event);
    return event.defaultPrevented;
  }

  it('opens a link of an answer in the browser and never navigates the popover', () => {
    container.innerHTML = renderMarkdown('See [the docs](https://example.com/docs?q=1) now.');
    const link = container.querySelector('a');
    expect(link).not.toBeNull();
    expect(link?.getAttribute('target')).toBeNull();
    expect(click(link as Element)).toBe(true);
    expect(opened).toEqual(['https://example.com/docs?q=1']);
    expect(window.location.href).toBe(startUrl);
  });

  it('handles a click on text inside the link, mailto, and middle clicks; ignores right clicks', () => {
    container.innerHTML = renderMarkdown('[**bold** link](http://example.org/x) and [mail](mailto:me@example.com)');
    const [web, mail] = [...container.querySelectorAll('a')];
    click(web?.querySelector('strong') as Element);
    click(mail as Element);
    expect(click(web as Element, { button: 1 }, 'auxclick')).toBe(true);
    expect(click(web as Element, { button: 2 }, 'auxclick')).toBe(false);
    expect(opened).toEqual(['http://example.org/x', 'mailto:me@example.com', 'http://example.org/x']);
  });

  it('covers <area href> of an image map, which DOMPurify keeps', () => {
    container.innerHTML = renderMarkdown(
      '<map name="m"><area shape="rect" coords="0,0,10,10" href="https://example.com/area" target="_top"></map>',
    );
    const area = container.querySelector('area');
    expect(area?.getAttribute('href')).toBe('https://example.com/area');
    expect(area?.getAttribute('target')).toBeNull();
    expect(click(area as Element)).toBe(true);
    expect(opened).toEqual(['https://example.com/area']);
  });

  it('cancels links it will not open, and in-page anchors only scroll', () => {
    container.innerHTML = '<a href="file:///etc/passwd">f</a><a href="#part-2">jump</a><h2 id="part-2">Part 2</h2>';
    const heading = container.querySelector('h2') as HTMLElement;
    const scrolled = vi.fn();
    heading.scrollIntoView = scrolled;
    const [file, anchor] = [...container.querySelectorAll('a')];
    expect(click(file as Element)).toBe(true);
    expect(click(anchor as Element)).toBe(true);
    expect(scrolled).toHaveBeenCalledOnce();
    expect(opened).toEqual([]);
    expect(window.location.hash).toBe('');
  });

  it('leaves clicks elsewhere alone', () => {
    container.innerHTML = '<button type="button">ok</button><a>no href</a>';
    expect(click(container.querySelector('button') as Element)).toBe(false);
    expect(click(container.querySelector('a') as Element)).toBe(false);
  });

  it('says on the link itself when the browser could not be asked', async () => {
    remove();
    const errors: string[] = [];
    remove = installLinkHandler(
      document,
      () => Promise.reject({ code: 'IPC_ERROR', message: 'no browser' }),
      (url) => errors.push(url),
    );
    container.innerHTML = renderMarkdown('[x](https://example.com/x)');
    const link = container.querySelector('a') as HTMLElement;
    click(link);
    await vi.waitFor(() => expect(errors).toEqual(['https://example.com/x']));
    expect(link.classList.contains(OPEN_FAILED_CLASS)).toBe(true);
    expect(link.title).toBe('Could not open this link in your browser: no browser');
  });
});
