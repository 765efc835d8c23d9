// page.test.mjs — the chat page of `cmf serve` (GET /) in headless Chromium (playwright-core driving the system's
// chromium; run by ../js_page.sh). argv: MODEL.cmf SCREENSHOT.png. With an API key set on the server, the page
// gets the key typed into its key field, the user types a message and presses Enter; the answer must arrive in
// several streamed chunks (the page counts the SSE deltas it applied) and equal the non-streamed answer of the
// same request (greedy, same conversation) fetched directly; the page must load no external resource.
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const [model, shot] = process.argv.slice(2);
const KEY = 'page-key';
const srv = await startServer(model, ['--api-key', KEY, '-c', '256', '-t', '1']);
let browser, failed = false;
try {
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage();
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(srv.url)) foreign.push(r.url()); });
  // greedy answers, so the page's streamed text can be compared with a direct request
  await page.route('**/v1/chat/completions', async (route) => {
    const body = JSON.parse(route.request().postData());
    body.temperature = 0;
    body.max_tokens = 40;
    await route.continue({ postData: JSON.stringify(body) });
  });
  const res = await page.goto(srv.url + '/');
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /text\/html/);
  await page.fill('#key', KEY);
  await page.fill('#msg', 'Tell me a story about a cat');
  await page.press('#msg', 'Enter');
  const out = page.locator('.msg.assistant').first();
  await page.waitForFunction(() => {
    const d = document.querySelector('.msg.assistant');
    return d && d.dataset.state && d.dataset.state !== 'streaming';
  }, null, { timeout: 30000 });
  assert.equal(await out.getAttribute('data-state'), 'done', await out.textContent());
  const text = await out.textContent();
  const chunks = Number(await out.getAttribute('data-chunks'));
  assert.ok(chunks > 3, `streamed in ${chunks} chunk(s)`);
  const direct = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a story about a cat' }], temperature: 0, max_tokens: 40 }),
  });
  const want = (await direct.json()).choices[0].message.content;
  assert.equal(text, want, 'the page shows the model\'s answer');
  assert.equal(await page.locator('#model').textContent(), 'stories');
  assert.deepEqual(foreign, [], 'no external resources');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`ok: the page streamed ${chunks} chunks (${text.length} characters); screenshot ${shot}`);
} catch (e) {
  failed = true;
  console.error('FAIL', e && e.stack ? e.stack : e);
} finally {
  if (browser) await browser.close();
  const code = await srv.stop();
  if (code !== 0) { failed = true; console.error(`FAIL server exit status ${code}`); }
}
process.exit(failed ? 1 : 0);
