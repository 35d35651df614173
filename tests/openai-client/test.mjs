// The official OpenAI Node client (npm `openai`) against `hydragen serve` with the demo model:
// completions, chat, both streamed, n > 1, seeds, a 400 as the client's APIError, and a
// graceful SIGTERM (exit 0). Usage: node test.mjs HYDRAGEN_BINARY MODEL_DIR
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const [binary, modelDir] = process.argv.slice(2);
if (!binary || !modelDir) {
  console.error('usage: node test.mjs HYDRAGEN_BINARY MODEL_DIR');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const watchdog = setTimeout(() => { console.error('openai-client: timed out after 120 s'); process.exit(1); }, 120_000);

const server = spawn(binary, ['serve', '-m', modelDir, '--device', 'cpu', '--port', '0', '--api-key', 'sesame',
                              '--served-model-name', 'demo', '--chat-template', path.join(here, 'chatml.jinja')],
                     { stdio: ['ignore', 'inherit', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  server.stderr.on('data', (chunk) => {
    log += chunk;
    process.stderr.write(chunk);
    const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on('exit', (code) => reject(new Error(`hydragen serve exited early (${code}): ${log}`)));
});
const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sesame', maxRetries: 0, timeout: 60_000 });
const checks = [];
async function check(name, fn) {
  await fn();
  checks.push(name);
  console.log(`ok - ${name}`);
}

try {
  await check('models', async () => {
    const models = await client.models.list();
    assert.equal(models.data[0].id, 'demo');
  });
  await check('completions, n > 1, seed', async () => {
    const body = { model: 'demo', prompt: 'In the beginning', max_tokens: 8, temperature: 0.9, seed: 3, n: 2 };
    const a = await client.completions.create(body);
    const b = await client.completions.create(body);
    assert.equal(a.choices.length, 2);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.ok(a.usage.completion_tokens > 0 && a.usage.prompt_tokens > 0);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  });
  await check('completions streamed', async () => {
    const whole = await client.completions.create({ model: 'demo', prompt: 'And God said', max_tokens: 10, temperature: 0 });
    const stream = await client.completions.create({ model: 'demo', prompt: 'And God said', max_tokens: 10,
                                                     temperature: 0, stream: true,
                                                     stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) text += c.text;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, whole.choices[0].text);
    assert.deepEqual(usage, whole.usage);
  });
  const messages = [{ role: 'system', content: 'Speak as the prophets.' }, { role: 'user', content: 'Who made the light?' }];
  await check('chat', async () => {
    const out = await client.chat.completions.create({ model: 'demo', messages, max_tokens: 8, temperature: 0,
                                                       logprobs: true, top_logprobs: 2 });
    assert.equal(out.choices[0].message.role, 'assistant');
    assert.ok(out.choices[0].message.content.length > 0);
    assert.equal(out.choices[0].logprobs.content[0].top_logprobs.length, 2);
  });
  await check('chat streamed, n > 1', async () => {
    const whole = await client.chat.completions.create({ model: 'demo', messages, max_tokens: 8, temperature: 0, n: 2 });
    const stream = await client.chat.completions.create({ model: 'demo', messages, max_tokens: 8, temperature: 0, n: 2,
                                                          stream: true });
    const text = ['', ''];
    for await (const chunk of stream) for (const c of chunk.choices) text[c.index] += c.delta.content ?? '';
    assert.deepEqual(text, whole.choices.map((c) => c.message.content));
  });
  await check('a bad field is a 400 naming it', async () => {
    await assert.rejects(client.completions.create({ model: 'demo', prompt: 'x', temperature: -1 }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, 'temperature');
      return true;
    });
  });
  await check('a wrong key is a 401', async () => {
    const wrong = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'nope', maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  });
} finally {
  server.kill('SIGTERM');
}
const { code, signal } = await exited;
clearTimeout(watchdog);
assert.equal(signal, null, `hydragen serve died of ${signal}`);
assert.equal(code, 0, 'hydragen serve exits 0 after SIGTERM');
console.log(`openai-client: ${checks.length} checks passed; the server exited 0`);
