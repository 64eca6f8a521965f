// Streams a completion and a chat completion from the router with the official openai package.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.ROUTER_URL, apiKey: "unused" });
const expected = "Hello, world!";

function check(what, got) {
  if (got !== expected) {
    console.error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`${what}: ok`);
}

let text = "";
let usage = null;
const completion = await client.completions.create({
  model: "tiny", prompt: "hi", max_tokens: 100, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of completion) {
  if (chunk.choices.length > 0) text += chunk.choices[0].text;
  if (chunk.usage) usage = chunk.usage;
}
check("completion stream", text);
if (!usage || usage.completion_tokens !== 14) {
  console.error("usage missing or wrong:", usage);
  process.exit(1);
}

text = "";
const chat = await client.chat.completions.create({
  model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true,
});
for await (const chunk of chat) text += chunk.choices[0]?.delta?.content ?? "";
check("chat stream", text);

const full = await client.chat.completions.create({
  model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 5,
});
if (full.choices[0].message.content !== "Hello" || full.choices[0].finish_reason !== "length") {
  console.error("non-streaming chat:", JSON.stringify(full));
  process.exit(1);
}
console.log("chat: ok");

try {
  await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: -1 });
  console.error("expected a 400");
  process.exit(1);
} catch (e) {
  if (e.status !== 400 || e.param !== "max_tokens") {
    console.error("wrong error:", e.status, e.message, e.param);
    process.exit(1);
  }
  console.log("400 error: ok");
}
